package stream

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
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
	ctx, stall := context.WithCancelCause(context.Background())
	defer stall(nil)
	o := newOutbox(ctx, stall, deliver, 10*time.Second, recovery.Guard{})
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
	ctx, stall := context.WithCancelCause(context.Background())
	defer stall(nil)
	o := newOutbox(ctx, stall, func(*ctrlv1.DeploymentChangeEvent) error { calls++; return gone }, time.Minute, recovery.Guard{})
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

// client is a stream's client as an outbox's deliver sees it: it takes
// events until stop is closed, then takes nothing more (SendMsg blocks,
// as grpc-go's does once the client's window is full) until ctx ends.
type client struct {
	ctx  context.Context
	stop chan struct{}
}

func (c *client) deliver(*ctrlv1.DeploymentChangeEvent) error {
	select {
	case <-c.stop:
		<-c.ctx.Done()
		return c.ctx.Err()
	default:
		return nil
	}
}

// waitStalled waits for the handler's context ctx to end with a stall,
// for at most limit, and says when it ended.
func waitStalled(t *testing.T, ctx context.Context, limit time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("the stream was not ended %v after its client stopped taking data", limit)
	}
	ended := time.Now()
	var stall *stallError
	if !errors.As(context.Cause(ctx), &stall) {
		t.Fatalf("the stream ended with %v, want a stall", context.Cause(ctx))
	}
	return ended
}

// The send timeout counts from when the client last took data, whatever
// is queued: a client that takes a full sync and then stops, while only a
// keep-alive waits for it, is ended the timeout after it stopped, not
// once keep-alives have filled the queue (16 keep-alive intervals later).
// In a synctest bubble the clock moves only when every goroutine waits, so
// the stall comes exactly the timeout after the keep-alive began to wait.
func TestAnOutboxEndsAClientThatStopsTakingDataWhateverIsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		ctx, stall := context.WithCancelCause(context.Background())
		defer stall(nil)
		c := &client{ctx: ctx, stop: make(chan struct{})}
		o := newOutbox(ctx, stall, c.deliver, timeout, recovery.Guard{})
		for v := range uint64(5) { // a full sync
			if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: v}); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.flush(); err != nil {
			t.Fatal(err)
		}
		// Idle for longer than the timeout: nothing waits, so nothing is
		// late.
		time.Sleep(2 * timeout)
		if ctx.Err() != nil {
			t.Fatalf("an idle stream was ended: %v", context.Cause(ctx))
		}
		// A keep-alive taken, and half a timeout later the client stops:
		// the next keep-alive waits from then, not from the one before.
		if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: 5}); err != nil {
			t.Fatal(err)
		}
		if err := o.flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout / 2)
		close(c.stop)
		pending := time.Now()
		if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: 6}); err != nil {
			t.Fatal(err)
		}
		ended := waitStalled(t, ctx, 20*timeout)
		if waited := ended.Sub(pending); waited != timeout {
			t.Errorf("ended %v after the keep-alive began to wait, want the timeout of %v", waited, timeout)
		}
		var stallErr *stallError
		errors.As(context.Cause(ctx), &stallErr)
		if stallErr.pending != 1 {
			t.Errorf("the stall counts %d events pending, want the keep-alive", stallErr.pending)
		}
	})
}

// A client that keeps taking data, however slowly, is not ended: the
// timeout counts from its last take, not from when the first event still
// waiting was queued, and a full queue is no stall by itself. The client
// takes an event every tenth of the timeout: the 32 events take 3.2
// timeouts, exactly, on the bubble's clock.
func TestAnOutboxKeepsASlowClientThatTakesData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		ctx, stall := context.WithCancelCause(context.Background())
		defer stall(nil)
		deliver := func(*ctrlv1.DeploymentChangeEvent) error {
			select {
			case <-time.After(timeout / 10):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		o := newOutbox(ctx, stall, deliver, timeout, recovery.Guard{})
		start := time.Now()
		// Twice the queue: the handler waits for room much longer than the
		// timeout in all.
		for v := range uint64(2 * outboxSize) {
			if err := o.send(&ctrlv1.DeploymentChangeEvent{Version: v}); err != nil {
				t.Fatalf("send %d: %v", v, err)
			}
		}
		if err := o.flush(); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("a client taking an event every %v was ended: %v", timeout/10, context.Cause(ctx))
		}
		if took, want := time.Since(start), 2*outboxSize*timeout/10; took != want {
			t.Errorf("the client took the events in %v, want %v", took, want)
		}
	})
}
