package convergecheck

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// link is an agent's connection to ctrld as the agent sees it: one
// ClusterServiceClient whose target the checker can move to another ctrld
// replica, and whose open streams it can cut, without the agent knowing.
// In a deliberately broken system it also drops every delete event, as an
// agent that never applied a delete would.
type link struct {
	dropDeletes bool

	mu      sync.Mutex
	target  ctrlv1.ClusterServiceClient
	streams map[int]context.CancelFunc // open watch streams
	next    int
	// calls are the agent's SyncChecks calls that ctrld answered, in
	// order (the checks verdict reads them: noVerdictPass).
	calls []syncCall
}

func newLink(target ctrlv1.ClusterServiceClient, dropDeletes bool) *link {
	return &link{target: target, dropDeletes: dropDeletes, streams: map[int]context.CancelFunc{}}
}

// moveTo sends every later call to target and cuts the open streams, so the
// agent reconnects there at once.
func (l *link) moveTo(target ctrlv1.ClusterServiceClient) {
	l.mu.Lock()
	l.target = target
	l.mu.Unlock()
	l.cut()
}

// cut ends every open watch stream, as a broken connection would; the
// agent sees an error and reconnects from its last bookmark.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, cancel := range l.streams {
		cancel()
		delete(l.streams, id)
	}
}

func (l *link) current() ctrlv1.ClusterServiceClient {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.target
}

// WatchDeploymentChanges implements ctrlv1.ClusterServiceClient.
func (l *link) WatchDeploymentChanges(ctx context.Context, in *ctrlv1.WatchDeploymentChangesRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent], error) {
	ctx, cancel := context.WithCancel(ctx)
	l.mu.Lock()
	id := l.next
	l.next++
	l.streams[id] = cancel
	target := l.target
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(l.streams, id)
		l.mu.Unlock()
	})
	s, err := target.WatchDeploymentChanges(ctx, in, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	if !l.dropDeletes {
		return stream{s, cancel}, nil
	}
	return dropDeletes{stream{s, cancel}}, nil
}

// ReportDeploymentStatus implements ctrlv1.ClusterServiceClient.
func (l *link) ReportDeploymentStatus(ctx context.Context, in *ctrlv1.ReportDeploymentStatusRequest, opts ...grpc.CallOption) (*ctrlv1.ReportDeploymentStatusResponse, error) {
	return l.current().ReportDeploymentStatus(ctx, in, opts...)
}

// ReportSentinelStatus implements ctrlv1.ClusterServiceClient.
func (l *link) ReportSentinelStatus(ctx context.Context, in *ctrlv1.ReportSentinelStatusRequest, opts ...grpc.CallOption) (*ctrlv1.ReportSentinelStatusResponse, error) {
	return l.current().ReportSentinelStatus(ctx, in, opts...)
}

// ReportAgentStatus implements ctrlv1.ClusterServiceClient.
func (l *link) ReportAgentStatus(ctx context.Context, in *ctrlv1.ReportAgentStatusRequest, opts ...grpc.CallOption) (*ctrlv1.ReportAgentStatusResponse, error) {
	return l.current().ReportAgentStatus(ctx, in, opts...)
}

// ReportResourceSync implements ctrlv1.ClusterServiceClient.
func (l *link) ReportResourceSync(ctx context.Context, in *ctrlv1.ReportResourceSyncRequest, opts ...grpc.CallOption) (*ctrlv1.ReportResourceSyncResponse, error) {
	return l.current().ReportResourceSync(ctx, in, opts...)
}

// stream releases its context once the stream has ended, so a link does
// not keep the cancel functions of every stream it ever opened.
type stream struct {
	grpc.ServerStreamingClient[ctrlv1.DeploymentChangeEvent]
	cancel context.CancelFunc
}

func (s stream) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	ev, err := s.ServerStreamingClient.Recv()
	if err != nil {
		s.cancel()
	}
	return ev, err
}

// dropDeletes is the broken system's stream: deletes never reach the agent.
type dropDeletes struct{ stream }

func (s dropDeletes) Recv() (*ctrlv1.DeploymentChangeEvent, error) {
	for {
		ev, err := s.stream.Recv()
		if err != nil || !isDelete(ev) {
			return ev, err
		}
	}
}

func isDelete(ev *ctrlv1.DeploymentChangeEvent) bool {
	del := ctrlv1.Action_ACTION_DELETE
	return ev.GetDeployment().GetAction() == del || ev.GetSentinel().GetAction() == del || ev.GetCiliumNetworkPolicy().GetAction() == del
}

// SyncChecks implements ctrlv1.ClusterServiceClient, and records each
// call ctrld answered (syncCall). The agent's runner makes one call at a
// time, and a restarted agent's first call follows its predecessor's
// last, so the record is in order.
func (l *link) SyncChecks(ctx context.Context, in *ctrlv1.SyncChecksRequest, opts ...grpc.CallOption) (*ctrlv1.SyncChecksResponse, error) {
	start := time.Now()
	resp, err := l.current().SyncChecks(ctx, in, opts...)
	if err != nil {
		return resp, err
	}
	c := syncCall{start: start, end: time.Now(), results: map[string]bool{}, assigned: map[string]bool{}}
	for _, r := range in.GetResults() {
		c.results[r.GetId()] = r.GetHasValue() && r.GetError() == ""
	}
	for _, a := range resp.GetChecks() {
		c.assigned[a.GetId()] = true
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return resp, nil
}

// syncCalls is a copy of the calls recorded so far.
func (l *link) syncCalls() []syncCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}
