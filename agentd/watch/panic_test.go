package watch_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/watch"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// panickyCtrld's first stream panics in Recv; every later one sends a
// full sync's last bookmark, and then nothing.
type panickyCtrld struct {
	ctrlv1.ClusterServiceClient // only the watch is called
	connects                    atomic.Int32
}

func (c *panickyCtrld) WatchDeploymentChanges(ctx context.Context, _ *ctrlv1.WatchDeploymentChangesRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent], error) {
	return &panickyStream{ctx: ctx, first: c.connects.Add(1) == 1}, nil
}

type panickyStream struct {
	fakeStream
	ctx         context.Context
	first, sent bool
}

func (s *panickyStream) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	if s.first {
		panic("injected: a message that does not decode")
	}
	if !s.sent {
		s.sent = true
		return &ctrlv1.DeploymentChangeEvent{Version: 1, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{
			Bookmark: &ctrlv1.Bookmark{ResumeVersion: 1, FullSyncDone: true}}}, nil
	}
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// A panic while receiving a stream, or while handling it (here garbage
// collection, whose listing of present objects is nil and panics), ends
// that stream and is counted; the watcher reconnects, and the process
// lives on.
func TestAPanicEndsTheStreamAndTheWatcherReconnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &panickyCtrld{}
		m := metrics.New(prometheus.NewRegistry())
		d := dispatch.New(nil, slog.New(slog.DiscardHandler), nil)
		w := watch.New(client, d, nil,
			watch.Config{Region: "eu", Identity: "a", BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
			slog.New(slog.DiscardHandler), m)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); d.Run(ctx, 1) }() // its queue ends with it
		go func() { defer wg.Done(); w.Run(ctx) }()
		defer func() { cancel(); wg.Wait() }()

		// Two reconnects wait at most 2*BackoffMax.
		time.Sleep(time.Second)
		synctest.Wait()
		panics := func(where string) float64 { return testutil.ToFloat64(m.Panics.WithLabelValues(where)) }
		if client.connects.Load() < 3 || panics("watch") < 1 {
			t.Fatalf("%d streams opened, %v panics in handling; want reconnects after each panic", client.connects.Load(), panics("watch"))
		}
		if got := panics("watch-recv"); got != 1 {
			t.Errorf("counted %v panics in Recv, want 1", got)
		}
	})
}
