package watch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/watch"
	"github.com/deploysync/deploysync/internal/testmetrics"
	"github.com/deploysync/deploysync/rpc"
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

// fakeStream is what a fake stream needs besides Recv: the headers,
// which a real ctrld sends as soon as it accepts the stream.
type fakeStream struct{ grpc.ClientStream }

func (fakeStream) Header() (metadata.MD, error) { return metadata.Pairs(rpc.AcceptedHeader, "1"), nil }

type unknownEventStream struct {
	fakeStream
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

// fullSyncCtrld answers every stream from cursor 0 with a full sync of
// one deployment, "kept", and records each stream's cursor.
type fullSyncCtrld struct {
	ctrlv1.ClusterServiceClient // only the watch is called

	mu      sync.Mutex
	cursors []uint64
}

func (c *fullSyncCtrld) WatchDeploymentChanges(ctx context.Context, req *ctrlv1.WatchDeploymentChangesRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent], error) {
	c.mu.Lock()
	c.cursors = append(c.cursors, req.GetVersionLastSeen())
	c.mu.Unlock()
	s := &scriptedStream{ctx: ctx}
	if req.GetVersionLastSeen() == 0 {
		s.events = []*ctrlv1.DeploymentChangeEvent{
			{Version: 1, Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
				Action: ctrlv1.Action_ACTION_APPLY, Deployment: &ctrlv1.DeploymentState{DeploymentId: "kept", Namespace: "ns"}}}},
			{Version: 1, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{Bookmark: &ctrlv1.Bookmark{ResumeVersion: 1, FullSyncDone: true}}},
		}
	}
	return s, nil
}

// fullSyncs counts the streams opened with cursor 0.
func (c *fullSyncCtrld) fullSyncs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.cursors {
		if v == 0 {
			n++
		}
	}
	return n
}

type scriptedStream struct {
	fakeStream
	ctx    context.Context
	events []*ctrlv1.DeploymentChangeEvent
}

func (s *scriptedStream) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	if len(s.events) > 0 {
		ev := s.events[0]
		s.events = s.events[1:]
		return ev, nil
	}
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// deletions records the resources the dispatcher deletes.
type deletions struct {
	mu   sync.Mutex
	keys map[dispatch.Key]bool
}

func (d *deletions) Handle(_ context.Context, key dispatch.Key, in dispatch.Intent) error {
	if in.Delete {
		d.mu.Lock()
		d.keys[key] = true
		d.mu.Unlock()
	}
	return nil
}

func (d *deletions) has(key dispatch.Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.keys[key]
}

// When one kind cannot be listed for garbage collection, the other kinds
// are still collected (a deployment stopped while the agent was away stops
// now), the failure is the watcher's error, the full sync is not recorded
// as completed, and it is redone, with periodic resyncs off, until a
// collection covers every kind.
func TestIncompleteGarbageCollectionIsReportedAndRedone(t *testing.T) {
	var (
		kept      = dispatch.Key{Kind: rpc.KindDeployment, ID: "kept"}
		stopped   = dispatch.Key{Kind: rpc.KindDeployment, ID: "stopped"}
		oldPolicy = dispatch.Key{Kind: rpc.KindCiliumNetworkPolicy, ID: "old"}
	)
	var calls atomic.Int32
	listPolicies := make(chan struct{})
	present := func() ([]dispatch.Key, error) {
		if calls.Add(1) == 1 {
			return []dispatch.Key{kept, stopped}, errors.New("list managed cilium_network_policy objects: forbidden")
		}
		<-listPolicies
		return []dispatch.Key{kept, oldPolicy}, nil
	}
	client := &fullSyncCtrld{}
	deleted := &deletions{keys: map[dispatch.Key]bool{}}
	d := dispatch.New(deleted, slog.New(slog.DiscardHandler), nil)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	w := watch.New(client, d, present,
		watch.Config{Region: "eu", Identity: "a", ResyncInterval: -1, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		slog.New(slog.DiscardHandler), m)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx, 2) }()
	go func() { defer wg.Done(); w.Run(ctx) }()
	defer func() { cancel(); close(listPolicies); wg.Wait() }()

	eventually(t, "the deployment the full sync did not list is deleted", func() bool { return deleted.has(stopped) })
	if deleted.has(kept) {
		t.Error("a listed deployment was deleted")
	}
	// The redo's listing waits for listPolicies: this is the state between
	// the failed collection and the redo.
	eventually(t, "the full sync is redone with periodic resyncs off", func() bool { return client.fullSyncs() >= 2 && calls.Load() >= 2 })
	if err := w.GCError(); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("the failed listing is not the watcher's error: %v", err)
	}
	if !w.LastFullSync().IsZero() || testmetrics.Value(t, reg, "agentd_full_syncs_total") != 0 {
		t.Errorf("a full sync whose collection was incomplete counts as completed (last %v, %v counted)", w.LastFullSync(), testmetrics.Value(t, reg, "agentd_full_syncs_total"))
	}

	listPolicies <- struct{}{}
	eventually(t, "the redo collects the kind that failed and completes", func() bool {
		return deleted.has(oldPolicy) && w.GCError() == nil && !w.LastFullSync().IsZero()
	})
	if n := testmetrics.Value(t, reg, "agentd_full_syncs_total"); n != 1 {
		t.Errorf("%v full syncs counted, want 1", n)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
