package tailer_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
)

// panicOnce is a counter that panics on its first Inc once armed: it
// stands in for any bug in the middle of a poll.
type panicOnce struct {
	prometheus.Counter
	armed atomic.Bool
}

func (c *panicOnce) Inc() {
	if c.armed.CompareAndSwap(true, false) {
		panic("injected: a bug in a poll")
	}
	c.Counter.Inc()
}

// A panic in a poll neither ends the process nor leaves streams waiting
// on a dead tailer, and loses nothing (I2): it is counted, every
// subscription ends with ErrRestarted, and the tailer starts over from its
// watermark. The panic strikes where it hurts most: after the poll moved
// past a row above an open hole, before it handed that row on. A tailer
// that went on from where the poll stopped would never deliver that row.
func TestAPanicInAPollRestartsTheTailerAndLosesNothing(t *testing.T) {
	db := storetest.New(t)
	m := metrics.New(prometheus.NewRegistry())
	holds := &panicOnce{Counter: m.WatermarkHolds} // counted once a poll found an open hole
	m.WatermarkHolds = holds
	tl := startTailerWith(t, db, tailer.Config{PollInterval: 5 * time.Millisecond}, m)
	ctx := t.Context()

	before, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	held := openChange(t, db, "eu") // takes a pk and holds it open
	defer held.Rollback()
	holds.armed.Store(true)
	if err := openChange(t, db, "eu").Commit(); err != nil { // above the hole
		t.Fatal(err)
	}

	awaitEnd(t, before, 5*time.Second, tailer.ErrRestarted, "the subscription was not ended after the panic")
	if got := testutil.ToFloat64(m.Panics.WithLabelValues("tailer")); got != 1 {
		t.Errorf("counted %v panics, want 1", got)
	}

	after, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	// Everything above the subscription's watermark reaches it, in Early
	// or on C: the row committed before the panic and the held one.
	got := slices.Clone(after.Early)
	got = append(got, collect(t, after, 2-len(got), 5*time.Second)...)
	for _, c := range got {
		if c.Version <= after.Watermark {
			t.Fatalf("got %+v at or below the subscription's watermark %d", c, after.Watermark)
		}
	}
}

// A tailer that ended before it ever started (its start failed, or
// panicked) turns subscribers away instead of leaving every watch waiting
// for it forever.
func TestSubscribeToATailerThatNeverStartedFails(t *testing.T) {
	db := storetest.New(t)
	tl := tailer.New(db.SQL, tailer.Config{}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // start gives up at once
	tl.Run(ctx)
	wait, stop := context.WithTimeout(t.Context(), 5*time.Second)
	defer stop()
	sub, err := tl.Subscribe(wait, "eu")
	if !errors.Is(err, tailer.ErrStopped) {
		t.Fatalf("Subscribe: %v, %v; want ErrStopped", sub, err)
	}
}
