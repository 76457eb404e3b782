package streamtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Key names a resource in a region's view.
type Key = rpc.Resource

// Follower follows one region's stream.
type Follower struct {
	client   ctrlv1.ClusterServiceClient
	region   string
	identity string
	batches  bool // asks for batches

	mu         sync.Mutex
	cursor     uint64
	view       map[Key]*ctrlv1.DeploymentChangeEvent // applied resources
	syncSeen   map[Key]bool                          // listed since the full sync began
	inSync     bool
	fullSyncs  int
	resyncs    int
	reconnects int
	received   int
	cancel     context.CancelFunc // of the current stream
	onEvent    func(*ctrlv1.DeploymentChangeEvent, time.Time)
	lastErr    error
}

// New returns a follower for region; identity names it to ctrld.
func New(client ctrlv1.ClusterServiceClient, region, identity string) *Follower {
	return &Follower{client: client, region: region, identity: identity, view: map[Key]*ctrlv1.DeploymentChangeEvent{}}
}

// Resume returns a follower that carries on from a snapshot another
// follower of region took at a bookmark: its cursor and its view, as an
// agent restarted with that saved state would.
func Resume(client ctrlv1.ClusterServiceClient, region, identity string, from Snapshot) *Follower {
	f := New(client, region, identity)
	f.cursor = from.Cursor
	for k, v := range from.View {
		f.view[k] = v
	}
	return f
}

// WithBatches makes f ask for batches (as agentd does), which it unpacks
// into their events: events, the hook and Received count them one by one
// as if they had come alone. It returns f.
func (f *Follower) WithBatches() *Follower {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = true
	return f
}

// Region is the region followed.
func (f *Follower) Region() string { return f.region }

// OnEvent registers a hook called (under the follower's lock) for every
// event received, with its arrival time.
func (f *Follower) OnEvent(fn func(*ctrlv1.DeploymentChangeEvent, time.Time)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onEvent = fn
}

// Run follows until ctx ends, reconnecting after any stream end. It
// returns the error of a call that can never succeed (auth, bad input).
func (f *Follower) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := f.once(ctx)
		switch status.Code(err) {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument:
			return err
		}
		f.mu.Lock()
		f.lastErr = err
		f.reconnects++
		f.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Disconnect ends the current stream; Run reconnects from the last bookmark.
func (f *Follower) Disconnect() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		f.cancel()
	}
}

func (f *Follower) once(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.cancel = cancel
	cursor, batches := f.cursor, f.batches
	if cursor == 0 {
		f.syncSeen, f.inSync = map[Key]bool{}, true
	}
	f.mu.Unlock()

	stream, err := f.client.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{
		Region: f.region, VersionLastSeen: cursor, AgentIdentity: f.identity, Batches: batches,
	})
	if err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		if msg.GetBatch() != nil && !batches {
			return fmt.Errorf("a batch for a client that did not ask for one: %v", msg)
		}
		events, err := rpc.Unbatch(msg)
		if err != nil {
			return err
		}
		for _, ev := range events {
			if done, err := f.handle(ev); done || err != nil {
				return err
			}
		}
	}
}

// handle applies one event to the view; done means reconnect now.
func (f *Follower) handle(ev *ctrlv1.DeploymentChangeEvent) (done bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received++
	if f.onEvent != nil {
		f.onEvent(ev, time.Now())
	}
	if r, action, ok := rpc.ResourceOf(ev); ok {
		f.apply(r, action, ev)
		return false, nil
	}
	switch e := ev.Event.(type) {
	case *ctrlv1.DeploymentChangeEvent_Bookmark:
		if e.Bookmark.GetFullSyncDone() && f.inSync {
			// GC: whatever the full sync did not list is gone.
			for k := range f.view {
				if !f.syncSeen[k] {
					delete(f.view, k)
				}
			}
			f.inSync, f.syncSeen = false, nil
			f.fullSyncs++
		}
		if f.inSync {
			return false, errors.New("bookmark during a full sync without full_sync_done")
		}
		if v := e.Bookmark.GetResumeVersion(); v > f.cursor {
			f.cursor = v
		}
	case *ctrlv1.DeploymentChangeEvent_ResyncRequired:
		f.cursor = 0
		f.resyncs++
		return true, nil
	default:
		return false, fmt.Errorf("unknown event %T", ev.Event)
	}
	return false, nil
}

func (f *Follower) apply(k Key, action ctrlv1.Action, ev *ctrlv1.DeploymentChangeEvent) {
	switch action {
	case ctrlv1.Action_ACTION_APPLY:
		f.view[k] = ev
		if f.inSync {
			f.syncSeen[k] = true
		}
	case ctrlv1.Action_ACTION_DELETE:
		delete(f.view, k)
		if f.inSync {
			delete(f.syncSeen, k)
		}
	}
}

// Snapshot is what a follower has seen so far.
type Snapshot struct {
	Cursor     uint64
	View       map[Key]*ctrlv1.DeploymentChangeEvent
	FullSyncs  int
	Resyncs    int
	Reconnects int
	Received   int
	LastErr    error
}

// Snapshot returns a copy of the follower's state.
func (f *Follower) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	view := make(map[Key]*ctrlv1.DeploymentChangeEvent, len(f.view))
	for k, v := range f.view {
		view[k] = v
	}
	return Snapshot{Cursor: f.cursor, View: view, FullSyncs: f.fullSyncs, Resyncs: f.resyncs,
		Reconnects: f.reconnects, Received: f.received, LastErr: f.lastErr}
}

// WaitFor polls cond against snapshots until it holds or timeout passes.
func (f *Follower) WaitFor(timeout time.Duration, cond func(Snapshot) bool) (Snapshot, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := f.Snapshot()
		if cond(s) {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
