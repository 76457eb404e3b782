package stream

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// An outbox's sender runs only while events wait, and comes and goes as
// they do: however the handler's sends interleave with a sender deciding
// to end, every event reaches the client, in order, and once the queue is
// empty no sender is left running.
func TestAnOutboxDeliversEveryEventThoughItsSenderComesAndGoes(t *testing.T) {
	const events = 20000
	var mu sync.Mutex
	var got []uint64
	deliver := func(ev *ctrlv1.DeploymentChangeEvent) error {
		if rand.IntN(8) == 0 {
			runtime.Gosched() // a client that takes a moment
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev.Version)
		return nil
	}
	o := newOutbox(context.Background(), deliver, 10*time.Second, recovery.Guard{})
	for v := range uint64(events) {
		if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: v}); err != nil {
			t.Fatalf("send %d: %v", v, err)
		}
		// Bursts of a few events, then a pause of random length: the
		// sender keeps ending and starting again.
		if rand.IntN(3) == 0 {
			for range rand.IntN(4) {
				runtime.Gosched()
			}
		}
	}
	if err := o.flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != events {
		t.Fatalf("the client got %d of %d events once flush returned", len(got), events)
	}
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("event %d is version %d: out of order", i, v)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running {
		t.Errorf("a sender still runs with nothing queued")
	}
}

// A send that fails ends the sending for good: the handler learns of it
// (here from flush), and no new sender starts for later events.
func TestAnOutboxWhoseSendFailedSaysSo(t *testing.T) {
	gone := errors.New("the client went away")
	calls := 0
	o := newOutbox(context.Background(), func(*ctrlv1.DeploymentChangeEvent) error { calls++; return gone }, time.Minute, recovery.Guard{})
	if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: 1}); err != nil {
		t.Fatalf("the first send only queues: %v", err)
	}
	if err := o.flush(); !errors.Is(err, gone) {
		t.Fatalf("flush: %v, want the send's error", err)
	}
	if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: 2}); err != nil {
		t.Fatalf("a later send only queues: %v", err)
	}
	if err := o.flush(); !errors.Is(err, gone) {
		t.Fatalf("flush after a later send: %v, want the send's error", err)
	}
	if calls != 1 {
		t.Errorf("%d sends tried, want 1: no sender starts once one failed", calls)
	}
}
