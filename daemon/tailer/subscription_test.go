package tailer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
)

// A subscriber that takes nothing is dropped once SubscriberBuffer
// notices wait for it, with ErrSlowSubscriber, and drops nobody else: a
// subscriber that keeps up gets every change meanwhile.
func TestASubscriberThatFallsBehindIsDroppedAlone(t *testing.T) {
	db := storetest.New(t)
	tl := startTailer(t, db, tailer.Config{PollInterval: 10 * time.Millisecond, SubscriberBuffer: 3})
	ctx := context.Background()
	slow, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	keepsUp, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer keepsUp.Close()

	const changes = 6
	got := 0
	for range changes {
		if err := openChange(t, db, "eu").Commit(); err != nil {
			t.Fatal(err)
		}
		// One poll, one notice each: wait until this change arrived.
		got += len(collect(t, keepsUp, 1, 10*time.Second))
	}
	if got != changes {
		t.Fatalf("the subscriber that keeps up got %d changes, want %d", got, changes)
	}
	select {
	case <-slow.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the slow subscriber was never signalled")
	}
	if notices, ok := slow.Take(100); ok {
		t.Fatalf("the slow subscriber still takes notices (%d) after %d waited", len(notices), changes)
	}
	if !errors.Is(slow.Err(), tailer.ErrSlowSubscriber) {
		t.Fatalf("the slow subscriber ended with %v, want ErrSlowSubscriber", slow.Err())
	}
	if keepsUp.Err() != nil {
		t.Fatalf("the subscriber that keeps up ended: %v", keepsUp.Err())
	}
}
