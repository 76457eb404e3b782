package tailer_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
)

// panicOnce is a counter that panics on its first Add once armed: it
// stands in for any bug in the middle of a poll.
type panicOnce struct {
	prometheus.Counter
	armed atomic.Bool
}

func (c *panicOnce) Add(v float64) {
	if c.armed.CompareAndSwap(true, false) {
		panic("injected: a bug in a poll")
	}
	c.Counter.Add(v)
}

// A panic in a poll neither ends the process nor leaves streams waiting
// on a dead tailer: it is counted, every subscription ends with
// ErrRestarted, and the tailer starts over and delivers what comes next.
func TestAPanicInAPollRestartsTheTailer(t *testing.T) {
	db := storetest.New(t)
	m := metrics.New(prometheus.NewRegistry())
	rows := &panicOnce{Counter: m.PollRows}
	m.PollRows = rows
	tl := tailer.New(db.SQL, tailer.Config{PollInterval: 5 * time.Millisecond}, slog.New(slog.DiscardHandler), m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	before, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if err := openChange(t, db, "eu").Commit(); err != nil {
		t.Fatal(err)
	}
	collect(t, before, 1, 3*time.Second)

	rows.armed.Store(true)
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-before.C():
		case <-deadline:
			t.Fatal("the subscription was not ended after the panic")
		}
	}
	if !errors.Is(before.Err(), tailer.ErrRestarted) {
		t.Fatalf("subscription ended with %v, want ErrRestarted", before.Err())
	}
	var panics dto.Metric
	m.Panics.WithLabelValues("tailer").Write(&panics)
	if got := panics.GetCounter().GetValue(); got != 1 {
		t.Errorf("counted %v panics, want 1", got)
	}

	after, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if err := openChange(t, db, "eu").Commit(); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, after, 1, 5*time.Second); got[0].Version <= after.Watermark {
		t.Fatalf("got %+v at or below the subscription's watermark %d", got, after.Watermark)
	}
}
