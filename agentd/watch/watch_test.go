package watch_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/watch"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// newerCtrld opens every stream with an event this agent does not know
// (an empty oneof, as an unknown event type decodes) and records when each
// stream was opened.
type newerCtrld struct {
	ctrlv1.ClusterServiceClient // only the watch is called

	mu       sync.Mutex
	connects []time.Time
}

func (c *newerCtrld) WatchDeploymentChanges(ctx context.Context, _ *ctrlv1.WatchDeploymentChangesRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent], error) {
	c.mu.Lock()
	c.connects = append(c.connects, time.Now())
	c.mu.Unlock()
	return &unknownEventStream{ctx: ctx}, nil
}

func (c *newerCtrld) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.connects...)
}

type unknownEventStream struct {
	grpc.ClientStream
	ctx  context.Context
	sent bool
}

func (s *unknownEventStream) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	if !s.sent {
		s.sent = true
		return &ctrlv1.DeploymentChangeEvent{Version: 7}, nil
	}
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// A stream that ends because the agent cannot handle an event is not a
// healthy one: each reconnect waits longer (BackoffMin doubled per
// failure) instead of reconnecting, and full-syncing, at the first delay
// forever.
func TestUnhandledEventBacksOff(t *testing.T) {
	const backoffMin = 10 * time.Millisecond
	client := &newerCtrld{}
	d := dispatch.New(nil, slog.New(slog.DiscardHandler), nil)
	w := watch.New(client, d, func() ([]dispatch.Key, error) { return nil, nil },
		watch.Config{Region: "eu", Identity: "a", BackoffMin: backoffMin, BackoffMax: time.Minute},
		slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const streams = 7
	deadline := time.Now().Add(10 * time.Second)
	for len(client.times()) < streams {
		if time.Now().After(deadline) {
			t.Fatalf("only %d streams opened", len(client.times()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if w.LastError() == nil {
		t.Error("the handling error is not reported")
	}
	connects := client.times()
	for i := range streams - 1 {
		if gap, want := connects[i+1].Sub(connects[i]), backoffMin<<i; gap < want {
			t.Errorf("reconnect %d after %v, want at least %v (gaps must grow)", i+1, gap, want)
		}
	}
}
