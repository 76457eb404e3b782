package watch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
// failure, plus at most 4*BackoffMin of jitter) instead of reconnecting,
// and full-syncing, at the first delay forever. In a synctest bubble the
// streams' handling takes no time, so each gap is exactly the wait.
func TestUnhandledEventBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const backoffMin = 10 * time.Millisecond
		client := &newerCtrld{}
		d := dispatch.New(nil, slog.New(slog.DiscardHandler), nil)
		w := watch.New(client, d, func() ([]dispatch.Key, error) { return nil, nil },
			watch.Config{Region: "eu", Identity: "a", BackoffMin: backoffMin, BackoffMax: time.Minute},
			slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); d.Run(ctx, 1) }() // its queue ends with it
		go func() { defer wg.Done(); w.Run(ctx) }()
		defer func() { cancel(); wg.Wait() }()

		// Seven streams take at most 63+24 times BackoffMin.
		const streams = 7
		time.Sleep(100 * backoffMin)
		synctest.Wait()
		connects := client.times()
		if len(connects) < streams {
			t.Fatalf("only %d streams opened in %v", len(connects), 100*backoffMin)
		}
		if w.LastError() == nil {
			t.Error("the handling error is not reported")
		}
		for i := range streams - 1 {
			gap, least := connects[i+1].Sub(connects[i]), backoffMin<<i
			if most := least + 4*backoffMin; gap < least || gap > most {
				t.Errorf("reconnect %d after %v, want %v to %v (gaps must grow)", i+1, gap, least, most)
			}
		}
	})
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
	synctest.Test(t, func(t *testing.T) {
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

		synctest.Wait()
		if !deleted.has(stopped) {
			t.Fatal("the deployment the full sync did not list is not deleted")
		}
		if deleted.has(kept) {
			t.Error("a listed deployment was deleted")
		}
		// The redo's listing waits for listPolicies: this is the state between
		// the failed collection and the redo, which comes within BackoffMax.
		time.Sleep(time.Second)
		synctest.Wait()
		if client.fullSyncs() < 2 || calls.Load() < 2 {
			t.Fatalf("the full sync is not redone with periodic resyncs off (%d full syncs, %d listings)", client.fullSyncs(), calls.Load())
		}
		if err := w.GCError(); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("the failed listing is not the watcher's error: %v", err)
		}
		if !w.LastFullSync().IsZero() || testmetrics.Value(t, reg, "agentd_full_syncs_total") != 0 {
			t.Errorf("a full sync whose collection was incomplete counts as completed (last %v, %v counted)", w.LastFullSync(), testmetrics.Value(t, reg, "agentd_full_syncs_total"))
		}

		listPolicies <- struct{}{}
		synctest.Wait()
		if !deleted.has(oldPolicy) || w.GCError() != nil || w.LastFullSync().IsZero() {
			t.Fatalf("the redo did not collect the kind that failed and complete (deleted %v, error %v, last full sync %v)",
				deleted.has(oldPolicy), w.GCError(), w.LastFullSync())
		}
		if n := testmetrics.Value(t, reg, "agentd_full_syncs_total"); n != 1 {
			t.Errorf("%v full syncs counted, want 1", n)
		}
	})
}
