package watch_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/watch"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// batchingCtrld sends full syncs in batches, as ctrld does for an agent
// that asks for them: the first full sync is cut after its first batch
// (ctrld restarted, say), the second is whole and then cut after its
// bookmark, and every stream's request is recorded.
type batchingCtrld struct {
	ctrlv1.ClusterServiceClient // only the watch is called

	mu       sync.Mutex
	requests []*ctrlv1.WatchDeploymentChangesRequest
}

var errCut = errors.New("stream cut")

func (c *batchingCtrld) WatchDeploymentChanges(ctx context.Context, req *ctrlv1.WatchDeploymentChangesRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, req)
	deployment := func(id string) *ctrlv1.DeploymentState { return &ctrlv1.DeploymentState{DeploymentId: id} }
	batch := func(version uint64, ids ...string) *ctrlv1.DeploymentChangeEvent {
		g := &ctrlv1.DeploymentGroup{Shared: &ctrlv1.DeploymentState{Namespace: "ws-prod", Image: "app:1", Replicas: 2, SpecHash: "0123456789abcdef"}}
		for _, id := range ids {
			g.Deployments = append(g.Deployments, deployment(id))
		}
		return &ctrlv1.DeploymentChangeEvent{Version: version, Event: &ctrlv1.DeploymentChangeEvent_Batch{Batch: &ctrlv1.EventBatch{
			Deployments: []*ctrlv1.DeploymentGroup{g},
			Events: []*ctrlv1.DeploymentChangeEvent{{Event: &ctrlv1.DeploymentChangeEvent_Sentinel{Sentinel: &ctrlv1.SentinelEvent{
				Action: ctrlv1.Action_ACTION_APPLY, Sentinel: &ctrlv1.SentinelState{SentinelId: "s", Namespace: "ws-prod", Image: "s:1", Replicas: 1}}}}},
		}}}
	}
	s := &scriptedStream{ctx: ctx}
	switch len(c.requests) {
	case 1: // cut after its first batch: no bookmark came
		return &cutStream{scriptedStream{ctx: ctx, events: []*ctrlv1.DeploymentChangeEvent{batch(4, "a", "b")}}}, nil
	case 2: // whole, then cut after its bookmark
		return &cutStream{scriptedStream{ctx: ctx, events: []*ctrlv1.DeploymentChangeEvent{
			batch(5, "a"),
			batch(5, "c"),
			{Version: 5, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{Bookmark: &ctrlv1.Bookmark{ResumeVersion: 5, FullSyncDone: true}}},
		}}}, nil
	}
	return s, nil
}

func (c *batchingCtrld) sent() []*ctrlv1.WatchDeploymentChangesRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*ctrlv1.WatchDeploymentChangesRequest(nil), c.requests...)
}

// cutStream ends with errCut once its events are out.
type cutStream struct{ scriptedStream }

func (s *cutStream) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	if len(s.events) > 0 {
		return s.scriptedStream.Recv()
	}
	return nil, errCut
}

// applies records each resource's last intent the dispatcher handled.
type applies struct {
	mu   sync.Mutex
	last map[dispatch.Key]dispatch.Intent
}

func (a *applies) Handle(_ context.Context, key dispatch.Key, in dispatch.Intent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[key] = in
	return nil
}

func (a *applies) of(key dispatch.Key) (dispatch.Intent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	in, ok := a.last[key]
	return in, ok
}

// The agent asks for batches, and each resource of a batch is applied as
// if it had come alone: its whole state (the group's shared fields with
// its own), versioned as the batch. A full sync cut after a batch is
// started over from cursor 0 (no bookmark came, so nothing was acked), and
// its garbage collection deletes what only the cut one listed.
func TestBatchedFullSyncsApplyEachResourceAndResumeOnlyFromBookmarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &batchingCtrld{}
		applied := &applies{last: map[dispatch.Key]dispatch.Intent{}}
		var acked []uint64
		var ackMu sync.Mutex
		d := dispatch.New(applied, slog.New(slog.DiscardHandler), func(v uint64) { ackMu.Lock(); acked = append(acked, v); ackMu.Unlock() })
		w := watch.New(client, d, func() ([]dispatch.Key, error) { return nil, nil },
			watch.Config{Region: "eu", Identity: "a", ResyncInterval: -1, BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond},
			slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); d.Run(ctx, 2) }()
		go func() { defer wg.Done(); w.Run(ctx) }()
		defer func() { cancel(); wg.Wait() }()

		key := func(id string) dispatch.Key { return dispatch.Key{Kind: rpc.KindDeployment, ID: id} }
		// Two reconnects wait at most 2*BackoffMax.
		time.Sleep(time.Second)
		synctest.Wait()
		requests := client.sent()
		if len(requests) < 3 || w.Cursor() != 5 {
			t.Fatalf("the second full sync is not done with a third stream resuming from its bookmark (%d streams, cursor %d)", len(requests), w.Cursor())
		}
		for i, req := range requests {
			if !req.GetBatches() {
				t.Errorf("stream %d did not ask for batches", i+1)
			}
		}
		if requests[1].GetVersionLastSeen() != 0 {
			t.Errorf("after a full sync cut short the agent resumed from %d, want 0 (a full sync again)", requests[1].GetVersionLastSeen())
		}
		if requests[2].GetVersionLastSeen() != 5 {
			t.Errorf("after the full sync the agent resumed from %d, want its bookmark 5", requests[2].GetVersionLastSeen())
		}
		if in, ok := applied.of(key("b")); !ok || !in.Delete {
			t.Errorf("b, listed only by the full sync cut short, is not deleted (applied %v, delete %v)", in.Event, in.Delete)
		}
		for _, id := range []string{"a", "c"} {
			in, ok := applied.of(key(id))
			want := &ctrlv1.DeploymentChangeEvent{Version: 5, Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
				Action: ctrlv1.Action_ACTION_APPLY, Deployment: &ctrlv1.DeploymentState{DeploymentId: id, Namespace: "ws-prod", Image: "app:1", Replicas: 2, SpecHash: "0123456789abcdef"}}}}
			if !ok || in.Delete || !proto.Equal(in.Event, want) {
				t.Errorf("%s: applied %v (delete %v), want %v", id, in.Event, in.Delete, want)
			}
		}
		if in, ok := applied.of(dispatch.Key{Kind: rpc.KindSentinel, ID: "s"}); !ok || in.Delete || in.Event.GetVersion() != 5 {
			t.Errorf("the sentinel in the batches: applied %v, %v", in.Event, ok)
		}
		ackMu.Lock()
		defer ackMu.Unlock()
		for _, v := range acked {
			if v != 5 {
				t.Errorf("acked %d: only the full sync's bookmark (5) may be acked", v)
			}
		}
	})
}
