package tui_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// now pins the clock so views are stable.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func at(ago time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-ago)) }

// fakeOperator serves fixed data and records the actions it receives.
// Narrow by design: the console's logic under test is what it shows and
// what it sends; the operator service itself is tested against MariaDB.
type fakeOperator struct {
	ctrlv1.OperatorServiceClient
	mu       sync.Mutex
	received []proto.Message
	down     bool
	refusal  error  // every read answers with it, from a ctrld that is up
	newest   string // a deployment listed first, as if just created
}

func (f *fakeOperator) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received = append(f.received, m)
}

func (f *fakeOperator) calls() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.received...)
}

func (f *fakeOperator) unavailable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return status.Error(codes.Unavailable, "connection refused")
	}
	return f.refusal
}

func (f *fakeOperator) ListRegions(context.Context, *ctrlv1.ListRegionsRequest, ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	return &ctrlv1.ListRegionsResponse{Regions: []*ctrlv1.RegionOverview{
		{Region: "ap-south", HeadVersion: 982, AckedVersion: 940, LagChanges: 42, LagSeconds: 312.5, PendingResources: 17,
			AgentConnected: false, AgentIdentity: "krane-ap-0", LastHeartbeat: at(6 * time.Minute), LastFullSync: at(2 * time.Hour),
			LastError: "stream: connection reset by peer", NotInSync: []*ctrlv1.SyncReason{
				{Code: "agent_down", Message: "agent down since 11:54:00", Since: at(6 * time.Minute)},
				{Code: "waiting", Message: "waiting for 42 changes"},
			}},
		{Region: "us-east", HeadVersion: 990, AckedVersion: 985, LagChanges: 3, LagSeconds: 1.2, PendingResources: 2,
			AgentConnected: true, AgentIdentity: "krane-us-0", ConnectedSince: at(3 * time.Hour), LastHeartbeat: at(2 * time.Second),
			LastFullSync: at(4 * time.Minute)},
		{Region: "eu-west", HeadVersion: 991, AckedVersion: 991, AgentConnected: true, AgentIdentity: "krane-eu-1",
			ConnectedSince: at(50 * time.Minute), LastHeartbeat: at(time.Second), LastFullSync: at(90 * time.Second), Paused: true,
			PausedSince: at(30 * time.Minute)},
	}}, nil
}

func (f *fakeOperator) GetRegion(_ context.Context, req *ctrlv1.GetRegionRequest, _ ...grpc.CallOption) (*ctrlv1.GetRegionResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	if req.Region == "ap-south" { // rows of its own, to tell the regions apart
		return &ctrlv1.GetRegionResponse{
			Overview: &ctrlv1.RegionOverview{Region: req.Region, HeadVersion: 982, AckedVersion: 940, LagChanges: 42, Paused: true,
				PausedSince: at(20 * time.Minute), LastHeartbeat: at(6 * time.Minute), NotInSync: []*ctrlv1.SyncReason{
					{Code: "paused", Message: "region paused since 11:40:00", Since: at(20 * time.Minute)},
					{Code: "full_sync_failing", Message: "last full sync failed: list StatefulSets: the server was unable to return a response in the time allotted"},
				}},
			Deployments: []*ctrlv1.DeploymentInRegion{
				{DeploymentId: "batch", Image: "ghcr.io/acme/batch:v1", DesiredStatus: "running", Replicas: 2, ReadyInstances: 2, Instances: 2, ActualStatus: "running",
					Sync:      &ctrlv1.ResourceSyncState{Reported: true, InSync: false, PendingChanges: 1},
					NotInSync: []*ctrlv1.SyncReason{{Code: "paused", Message: "region paused since 11:40:00"}}},
			},
		}, nil
	}
	return &ctrlv1.GetRegionResponse{
		Overview: &ctrlv1.RegionOverview{Region: req.Region, HeadVersion: 990, AckedVersion: 985, LagChanges: 3, LagSeconds: 1.2,
			AgentConnected: true, AgentIdentity: "krane-us-0"},
		Deployments: []*ctrlv1.DeploymentInRegion{
			{DeploymentId: "api", Image: "ghcr.io/acme/api:v7", DesiredStatus: "running", Replicas: 3, ReadyInstances: 3, Instances: 3, ActualStatus: "running", WorkflowStatus: "ready"},
			{DeploymentId: "worker", Image: "ghcr.io/acme/worker:v2", DesiredStatus: "running", Replicas: 2, ReadyInstances: 1, Instances: 2, ActualStatus: "progressing", WorkflowStatus: "deploying",
				Sync: &ctrlv1.ResourceSyncState{Reported: true, Error: `apply StatefulSet worker: admission webhook "quota.acme.io" denied the request: exceeded quota: cpu`,
					FailingSince: at(3 * time.Minute), PendingChanges: 1},
				NotInSync: []*ctrlv1.SyncReason{{Code: "apply_failing", Message: "apply failing since 11:57:00"}}},
			{DeploymentId: "old", Image: "ghcr.io/acme/old:v1", DesiredStatus: "stopped", Replicas: 1, ActualStatus: "stopped", WorkflowStatus: "ready"},
		},
		Sentinels: []*ctrlv1.SentinelInRegion{{SentinelId: "gw", DesiredState: "running", Replicas: 2, AvailableReplicas: 2, Health: "healthy"}},
		Policies:  []*ctrlv1.PolicyInRegion{{PolicyId: "p1", Name: "allow-api", DeploymentId: "api"}},
	}, nil
}

func (f *fakeOperator) ListPendingChanges(context.Context, *ctrlv1.ListPendingChangesRequest, ...grpc.CallOption) (*ctrlv1.ListPendingChangesResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	return &ctrlv1.ListPendingChangesResponse{Total: 3, Changes: []*ctrlv1.PendingChange{
		{Version: 986, ResourceType: "deployment_topology", ResourceId: "worker", CreatedAt: at(3 * time.Minute), Summary: "image worker:v1 -> worker:v2", Actor: "alice"},
		{Version: 988, ResourceType: "sentinel", ResourceId: "gw", CreatedAt: at(800 * time.Millisecond)},
		{Version: 990, ResourceType: "deployment_topology", ResourceId: "api", CreatedAt: at(200 * time.Millisecond), Summary: "replicas 3 -> 4", Actor: "bob"},
	}}, nil
}

func (f *fakeOperator) ListDeployments(context.Context, *ctrlv1.ListDeploymentsRequest, ...grpc.CallOption) (*ctrlv1.ListDeploymentsResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	newest := f.newest
	f.mu.Unlock()
	var first []*ctrlv1.DeploymentSummary
	if newest != "" {
		first = append(first, &ctrlv1.DeploymentSummary{DeploymentId: newest, WorkflowStatus: "deploying", Regions: []*ctrlv1.DeploymentInRegion{
			{DeploymentId: newest, Region: "eu-west", DesiredStatus: "running", Replicas: 1, ActualStatus: "progressing"}}})
	}
	return &ctrlv1.ListDeploymentsResponse{Deployments: append(first, []*ctrlv1.DeploymentSummary{
		{DeploymentId: "api", WorkflowStatus: "ready", Regions: []*ctrlv1.DeploymentInRegion{
			{DeploymentId: "api", Region: "eu-west", DesiredStatus: "running", Replicas: 3, ReadyInstances: 3, Instances: 3, ActualStatus: "running"},
			{DeploymentId: "api", Region: "us-east", DesiredStatus: "stopped", Replicas: 3, ActualStatus: "stopped"},
		}},
		{DeploymentId: "batch", WorkflowStatus: "failed", WorkflowError: "not ready after 5m0s: ap-south 0/2 ready", Regions: []*ctrlv1.DeploymentInRegion{
			{DeploymentId: "batch", Region: "ap-south", DesiredStatus: "running", Replicas: 2, ActualStatus: "progressing",
				NotInSync: []*ctrlv1.SyncReason{{Code: "paused"}, {Code: "agent_down"}}},
		}},
	}...)}, nil
}

func (f *fakeOperator) GetDeploymentHistory(_ context.Context, req *ctrlv1.GetDeploymentHistoryRequest, _ ...grpc.CallOption) (*ctrlv1.GetDeploymentHistoryResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	rev := func(n int32, action, actor, summary, image string, ago time.Duration, eu, us int32, usStatus string) *ctrlv1.DeploymentRevision {
		return &ctrlv1.DeploymentRevision{Revision: n, Action: action, Actor: actor, Summary: summary, Image: image, CreatedAt: at(ago),
			CpuMillicores: 250, MemoryMib: 256, EnvNames: []string{"DATABASE_URL", "LOG_LEVEL"}, FirstVersion: uint64(900 + 2*n), LastVersion: uint64(901 + 2*n),
			Regions: []*ctrlv1.RegionSpec{{Region: "eu-west", Replicas: eu, Status: "running"}, {Region: "us-east", Replicas: us, Status: usStatus}}}
	}
	return &ctrlv1.GetDeploymentHistoryResponse{Revisions: []*ctrlv1.DeploymentRevision{
		rev(4, "stop", "carol", "us-east running -> stopped", "ghcr.io/acme/api:v7", 2*time.Minute, 3, 3, "stopped"),
		rev(3, "update", "alice", "image ghcr.io/acme/api:v6 -> ghcr.io/acme/api:v7", "ghcr.io/acme/api:v7", time.Hour, 3, 3, "running"),
		rev(2, "scale", "bob", "replicas eu-west 2 -> 3; replicas us-east 2 -> 3", "ghcr.io/acme/api:v6", 3*time.Hour, 3, 3, "running"),
		rev(1, "deploy", "alice", "deployed ghcr.io/acme/api:v6 to eu-west, us-east", "ghcr.io/acme/api:v6", 5*time.Hour, 2, 2, "running"),
	}}, nil
}

func (f *fakeOperator) RollbackDeployment(_ context.Context, req *ctrlv1.RollbackDeploymentRequest, _ ...grpc.CallOption) (*ctrlv1.RollbackDeploymentResponse, error) {
	f.record(req)
	restored := req.ToRevision
	if restored == 0 {
		restored = 2 // ctrld's default for this history: 3 differs from 4 only in a stop
	}
	return &ctrlv1.RollbackDeploymentResponse{Revision: 5, Restored: restored}, nil
}

func (f *fakeOperator) Scale(_ context.Context, req *ctrlv1.ScaleRequest, _ ...grpc.CallOption) (*ctrlv1.ScaleResponse, error) {
	f.record(req)
	return &ctrlv1.ScaleResponse{}, nil
}

func (f *fakeOperator) ForceResync(_ context.Context, req *ctrlv1.ForceResyncRequest, _ ...grpc.CallOption) (*ctrlv1.ForceResyncResponse, error) {
	f.record(req)
	return &ctrlv1.ForceResyncResponse{}, nil
}

func (f *fakeOperator) SetRegionPaused(_ context.Context, req *ctrlv1.SetRegionPausedRequest, _ ...grpc.CallOption) (*ctrlv1.SetRegionPausedResponse, error) {
	f.record(req)
	return &ctrlv1.SetRegionPausedResponse{}, nil
}

func (f *fakeOperator) SetDesiredStatus(_ context.Context, req *ctrlv1.SetDesiredStatusRequest, _ ...grpc.CallOption) (*ctrlv1.SetDesiredStatusResponse, error) {
	f.record(req)
	if req.DeploymentId == "worker" {
		return nil, status.Error(codes.NotFound, `deployment "worker" in region "us-east": not found`)
	}
	return &ctrlv1.SetDesiredStatusResponse{}, nil
}

func start(t *testing.T, op *fakeOperator, w, h int) *teatest.TestModel {
	t.Helper()
	return startAt(t, op, w, h, func() time.Time { return now })
}

// clock is a test's clock: now until moved on.
type clock struct {
	mu     sync.Mutex
	passed time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return now.Add(c.passed)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.passed += d
}

func (f *fakeOperator) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func startAt(t *testing.T, op *fakeOperator, w, h int, clock func() time.Time) *teatest.TestModel {
	t.Helper()
	m := tui.New(op, tui.Options{Refresh: 50 * time.Millisecond, NoColor: true, Now: clock})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(w, h))
	t.Cleanup(func() { tm.Quit() })
	return tm
}

func waitFor(t *testing.T, tm *teatest.TestModel, text string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(text)) },
		teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
}

func keys(tm *teatest.TestModel, ks ...tea.KeyPressMsg) {
	for _, k := range ks {
		tm.Send(k)
	}
}

var (
	down  = tea.KeyPressMsg{Code: tea.KeyDown}
	enter = tea.KeyPressMsg{Code: tea.KeyEnter}
)

func press(r rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: r, Text: string(r)} }

func finalContent(t *testing.T, tm *teatest.TestModel) string {
	t.Helper()
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	return tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(tui.Model).Content()
}

// Navigate to a region and force its resync through the confirmation.
func TestForceResyncWithConfirmation(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, down, press('r')) // us-east is second, worst lag first
	waitFor(t, tm, "Force a full resync of region us-east?")
	if len(op.calls()) != 0 {
		t.Fatal("an action ran before the confirmation")
	}
	keys(tm, press('y'))
	waitFor(t, tm, "requested a full resync of us-east")
	calls := op.calls()
	if len(calls) != 1 || calls[0].(*ctrlv1.ForceResyncRequest).GetRegion() != "us-east" {
		t.Fatalf("operator service received %v", calls)
	}
	if got := finalContent(t, tm); !strings.Contains(got, "requested a full resync of us-east") {
		t.Fatalf("final view lacks the result:\n%s", got)
	}
}

// A cancelled confirmation sends nothing.
func TestCancelledConfirmationSendsNothing(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, press('p'))
	waitFor(t, tm, "Pause streaming to region ap-south?")
	keys(tm, press('n'))
	waitFor(t, tm, "cancelled: pause region ap-south")
	if calls := op.calls(); len(calls) != 0 {
		t.Fatalf("a cancelled action reached the server: %v", calls)
	}
}

// Pausing and resuming report their result in the script commands' words,
// naming the region.
func TestPauseAndResumeResults(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, press('p'), press('y')) // ap-south, running
	waitFor(t, tm, "paused ap-south")
	keys(tm, down, down, press('p'), press('y')) // eu-west, paused
	waitFor(t, tm, "resumed eu-west")
}

// Open a region, stop a deployment; a server error is shown in its words.
func TestStopDeploymentFromRegionDetail(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, down, enter)
	waitFor(t, tm, "PENDING CHANGES (3)")
	keys(tm, press('s'))
	waitFor(t, tm, "Stop deployment api in region us-east?")
	keys(tm, press('y'))
	waitFor(t, tm, "stopped api in us-east")
	keys(tm, down, press('s'), press('y'))
	waitFor(t, tm, "FAILED: stop worker in us-east: NotFound")
	calls := op.calls()
	if len(calls) != 2 {
		t.Fatalf("calls %v", calls)
	}
	first := calls[0].(*ctrlv1.SetDesiredStatusRequest)
	if first.DeploymentId != "api" || first.Region != "us-east" || first.Status != ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED {
		t.Fatalf("first call %v", first)
	}
}

// The selection stays on the same deployment when a refresh lists a new
// one above it: an action must not land on whatever slid under the cursor.
func TestSelectionFollowsItsDeploymentAcrossRefreshes(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
	waitFor(t, tm, "WORKFLOW")
	keys(tm, down, down) // batch in ap-south
	op.mu.Lock()
	op.newest = "canary"
	op.mu.Unlock()
	waitFor(t, tm, "canary")
	keys(tm, press('s'))
	waitFor(t, tm, "Stop deployment batch in region ap-south?")
}

// The deployments view lists every deployment per region; starting one
// from there sends exactly that region.
func TestStartDeploymentFromDeploymentsView(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
	waitFor(t, tm, "WORKFLOW")
	keys(tm, down, press('S'))
	waitFor(t, tm, "Start deployment api in region us-east?")
	keys(tm, press('y'))
	waitFor(t, tm, "started api in us-east")
	calls := op.calls()
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	if c := calls[0].(*ctrlv1.SetDesiredStatusRequest); c.Region != "us-east" || c.Status != ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING {
		t.Fatalf("call %v", c)
	}
}

// "/" filters the list; scaling from the filtered detail sends the new
// replica count.
func TestFilterThenScale(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	// Only us-east is left, so enter opens it (ap-south, first unfiltered,
	// otherwise). Keys are handled in order, so there is nothing to wait
	// for in between; the typed filter is not grepped from the output, as
	// frames drawn between keystrokes only carry the cells that changed.
	keys(tm, press('/'), press('u'), press('s'), enter, enter)
	waitFor(t, tm, "PENDING CHANGES (3)")
	keys(tm, press('/'), press('w'), press('o'), enter) // only the worker deployment
	keys(tm, press('+'))
	waitFor(t, tm, "Scale deployment worker in region us-east from 2 to 3 replicas?")
	keys(tm, press('y'))
	waitFor(t, tm, "scaled worker to 3 in us-east")
	calls := op.calls()
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	if c := calls[0].(*ctrlv1.ScaleRequest); c.DeploymentId != "worker" || c.Region != "us-east" || c.Replicas != 3 {
		t.Fatalf("call %v", c)
	}
	if got := finalContent(t, tm); !strings.Contains(got, "filter: wo\n") {
		t.Fatalf("the kept filter is not shown:\n%s", got)
	}
}

// A filter that matches nothing says so, naming the filter, on every list;
// the hint for an empty list is not shown then.
func TestFilterMatchingNothingSaysSo(t *testing.T) {
	m := refresh(t, tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) tea.Cmd {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		return cmd
	}
	turn := func(k tea.KeyPressMsg) { update(update(k)()) } // to a page, its read answered at once
	filterShows := func(want string) {
		t.Helper()
		for _, k := range []tea.KeyPressMsg{press('/'), press('z'), press('z'), enter} {
			update(k)
		}
		if got := m.Content(); !strings.Contains(got, want) || strings.Contains(got, " yet") || strings.Contains(got, "in this region") {
			t.Fatalf("want %q:\n%s", want, got)
		}
	}
	filterShows(`no regions match "zz"`)
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	filterShows(`no deployments match "zz"`)
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	filterShows(`no rollouts match "zz"`)
	update(press('/'))
	update(tea.KeyPressMsg{Code: tea.KeyEscape}) // the filter cleared
	turn(enter)                                  // api's rollout
	filterShows(`no regions match "zz"`)
	update(tea.KeyPressMsg{Code: tea.KeyEscape})
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	turn(enter) // ap-south's page
	filterShows(`no deployments match "zz"`)
}

// Help ("?") lists only the keys that do something on the page shown.
func TestHelpListsThePageKeys(t *testing.T) {
	m := refresh(t, tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) tea.Cmd {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		return cmd
	}
	turn := func(k tea.KeyPressMsg) { update(update(k)()) } // to a page, its read answered at once
	check := func(page string, want, not []string) {
		t.Helper()
		got := m.Content()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: help lacks %q:\n%s", page, w, got)
			}
		}
		for _, n := range not {
			if strings.Contains(got, n) {
				t.Errorf("%s: help lists %q, which does nothing there:\n%s", page, n, got)
			}
		}
	}
	update(press('?'))
	check("regions", []string{"open region", "force resync", "pause/resume"}, []string{"back", "stop deployment", "scale"})
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	check("deployments", []string{"stop deployment", "start deployment", "scale", "rollout"}, []string{"open region", "force resync", "pause/resume", "back"})
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	check("rollouts", []string{"open rollout"}, []string{"open region", "promote", "stop deployment", "esc back"})
	turn(enter)
	check("rollout", []string{"back", "promote now", "pause rollout", "abort"}, []string{"open region", "stop deployment", "scale"})
	update(tea.KeyPressMsg{Code: tea.KeyEscape})
	turn(tea.KeyPressMsg{Code: tea.KeyTab})
	turn(enter)
	check("region", []string{"back", "force resync", "pause/resume", "stop deployment", "scale"}, []string{"open region"})
}

// A region's reply that arrives after the operator moved on to another
// region is dropped: applied, it would show the first region's rows under
// the second's name, and actions would act on those rows while sending the
// second region.
func TestLateRegionReplyDoesNotReplaceShownRegion(t *testing.T) {
	m := refresh(t, tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) tea.Cmd {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		return cmd
	}
	slow := update(enter) // ap-south, worst lag first; its reply is held back
	update(tea.KeyPressMsg{Code: tea.KeyEscape})
	update(down)
	update(update(enter)()) // us-east, answered at once
	update(slow())          // ap-south's reply arrives last
	update(press('+'))
	got := m.Content()
	if strings.Contains(got, "batch") || !strings.Contains(got, "region us-east") ||
		!strings.Contains(got, "Scale deployment api in region us-east from 3 to 4 replicas?") {
		t.Fatalf("a late reply for ap-south changed the us-east view:\n%s", got)
	}
}

// results runs cmd as the program loop would and returns the messages it
// produces, batches flattened.
func results(cmd tea.Cmd) []tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	batch, ok := msg.(tea.BatchMsg)
	if !ok {
		return []tea.Msg{msg}
	}
	var out []tea.Msg
	for _, c := range batch {
		out = append(out, results(c)...)
	}
	return out
}

// An action's outcome leaves the status line after a while, and only its
// own expiry clears it: an older action's expiry leaves a newer outcome.
// Turning to another page clears it too.
func TestStatusLineClearsAfterAWhileAndOnPageChange(t *testing.T) {
	m := refresh(t, tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, StatusFor: time.Millisecond,
		NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) tea.Cmd {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		return cmd
	}
	shows := func(text string) bool { return strings.Contains(m.Content(), text) }

	update(press('r')) // ap-south
	var older []tea.Msg
	for _, msg := range results(update(press('y'))) { // the action's reply and the expiry of "running"
		older = append(older, results(update(msg))...) // the refresh and the expiry of the result
	}
	if !shows("requested a full resync of ap-south") {
		t.Fatalf("no result shown:\n%s", m.Content())
	}
	update(press('p'))
	newer := results(update(press('n')))
	for _, msg := range older {
		update(msg)
	}
	if !shows("cancelled: pause region ap-south") {
		t.Fatalf("the resync's expiry cleared the newer status:\n%s", m.Content())
	}
	for _, msg := range newer {
		update(msg)
	}
	if shows("cancelled") {
		t.Fatalf("status not cleared after its time:\n%s", m.Content())
	}

	update(press('p'))
	update(press('n'))
	update(tea.KeyPressMsg{Code: tea.KeyTab})
	if shows("cancelled") {
		t.Fatalf("status kept on another page:\n%s", m.Content())
	}
}

// Ctrl+C quits from anywhere, even while typing a filter or answering a
// confirmation: the dev stack is stopped with it.
func TestCtrlCQuitsFromAnywhere(t *testing.T) {
	for name, open := range map[string]tea.KeyPressMsg{"filter": press('/'), "confirmation": press('p')} {
		t.Run(name, func(t *testing.T) {
			tm := start(t, &fakeOperator{}, 80, 24)
			waitFor(t, tm, "eu-west")
			keys(tm, open, tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl})
			tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
		})
	}
}

// A lost connection shows a banner and recovers; nothing crashes.
func TestLostConnectionShowsBannerAndRecovers(t *testing.T) {
	op := &fakeOperator{down: true}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "ctrld unreachable, retrying")
	op.mu.Lock()
	op.down = false
	op.mu.Unlock()
	waitFor(t, tm, "ap-south")
	if got := finalContent(t, tm); strings.Contains(got, "unreachable") {
		t.Fatalf("banner still shown after recovery:\n%s", got)
	}
}

// Goldens of the main views' content at 80×24 and 120×40.
func TestViewGoldens(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		for _, view := range []string{"regions", "region", "deployments", "region-down-paused", "confirm-warning", "stale", "history", "confirm-rollback", "confirm-rollback-newest", "diff-rollback", "diff-rollback-newest", "diff-pending"} {
			name := view + "-" + strings.Join([]string{itoa(size[0]), itoa(size[1])}, "x")
			t.Run(name, func(t *testing.T) {
				op := &fakeOperator{}
				var c clock
				tm := startAt(t, op, size[0], size[1], c.now)
				waitFor(t, tm, "eu-west")
				switch view {
				case "region":
					keys(tm, down, enter)
					waitFor(t, tm, "PENDING CHANGES")
				case "deployments":
					keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
					waitFor(t, tm, "WORKFLOW")
				case "region-down-paused": // ap-south
					keys(tm, enter)
					waitFor(t, tm, "PENDING CHANGES")
				case "confirm-warning":
					keys(tm, enter)
					waitFor(t, tm, "PENDING CHANGES")
					keys(tm, press('+'))
					waitFor(t, tm, "[y] yes")
				case "diff-pending":
					keys(tm, down, enter)
					waitFor(t, tm, "PENDING CHANGES")
					keys(tm, press('d'), down, down) // replicas 3 -> 4
					waitFor(t, tm, "at version 990")
				case "history", "confirm-rollback", "confirm-rollback-newest", "diff-rollback", "diff-rollback-newest":
					keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
					waitFor(t, tm, "WORKFLOW")
					keys(tm, press('h'))
					waitFor(t, tm, "WHAT CHANGED")
					switch view {
					case "confirm-rollback":
						keys(tm, down, down, press('r')) // revision 2
						waitFor(t, tm, "[y] yes")
					case "confirm-rollback-newest": // ctrld picks: to 0
						keys(tm, press('r'))
						waitFor(t, tm, "[y] yes")
					case "diff-rollback":
						keys(tm, down, down, down, press('d')) // revision 1
						waitFor(t, tm, "+++ revision 1")
					case "diff-rollback-newest": // what ctrld's pick restores
						keys(tm, press('d'))
						waitFor(t, tm, "+++ revision 2")
					}
				case "stale": // ctrld went away 39 s after the last good read
					op.setDown(true)
					c.advance(39 * time.Second)
					waitFor(t, tm, "STALE")
				}
				golden.RequireEqual(t, finalContent(t, tm))
			})
		}
	}
}

func itoa(n int) string {
	return strings.TrimSpace(strings.Replace(time.Duration(n).String(), "ns", "", 1))
}

// An action in progress stays on the status line until its outcome
// replaces it, however long it takes: a blank line would look as if it had
// ended.
func TestRunningActionStaysShown(t *testing.T) {
	m := refresh(t, tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, StatusFor: time.Millisecond,
		NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) tea.Cmd {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		return cmd
	}
	update(press('r'))
	for _, msg := range results(update(press('y'))) {
		// Everything but the action's own reply: a slow ctrld has not
		// answered yet when the status's time is up.
		if strings.Contains(fmt.Sprintf("%T", msg), "Expired") {
			update(msg)
		}
	}
	if !strings.Contains(m.Content(), "running: ") {
		t.Fatalf("the action in progress left the status line:\n%s", m.Content())
	}
}

// While ctrld does not answer, the page keeps its last rows but says they
// are stale and since when, and their ages stop at the last good read;
// the first good read makes them live again.
func TestStaleDataIsMarkedUntilARefreshSucceeds(t *testing.T) {
	op := &fakeOperator{}
	var c clock
	reconnects := 0
	m := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: c.now, Reconnect: func() { reconnects++ }}))
	tick := func() {
		t.Helper()
		next, _ := m.Update(tea.KeyPressMsg{Code: tea.KeyTab}) // each page turn reads its page
		m = next.(tui.Model)
		next, _ = m.Update(tea.KeyPressMsg{Code: tea.KeyTab})
		m = next.(tui.Model)
		next, cmd := m.Update(tea.KeyPressMsg{Code: tea.KeyTab})
		m = next.(tui.Model)
		next, _ = m.Update(cmd())
		m = next.(tui.Model)
	}
	eu := func() string {
		t.Helper()
		for _, line := range strings.Split(m.Content(), "\n") {
			if strings.Contains(line, "eu-west") {
				return line
			}
		}
		t.Fatalf("no eu-west row:\n%s", m.Content())
		return ""
	}
	if got := eu(); !strings.Contains(got, "1m ago") || strings.Contains(got, "was") {
		t.Fatalf("live row: %q", got)
	}

	op.setDown(true)
	c.advance(39 * time.Second)
	tick()
	got := m.Content()
	if !strings.Contains(got, "STALE as of 12:00:00 (39s ago)") || !strings.Contains(got, "ctrld unreachable") {
		t.Fatalf("stale data not marked:\n%s", got)
	}
	// Its full sync was 90 s before the last read: live, it would read 2m.
	if row := eu(); !strings.HasPrefix(row, "?") || !strings.Contains(row, "1m ago") || !strings.Contains(row, "was PAUSED") {
		t.Fatalf("stale row reads as live: %q", row)
	}
	if reconnects == 0 {
		t.Fatal("a failed read did not ask the connection to retry at once")
	}

	op.setDown(false)
	c.advance(time.Second)
	tick()
	if got := m.Content(); strings.Contains(got, "STALE") || strings.Contains(got, "unreachable") || strings.Contains(got, "was ") {
		t.Fatalf("still marked stale after a good read:\n%s", got)
	}
	if row := eu(); !strings.Contains(row, "2m ago") {
		t.Fatalf("ages did not resume: %q", row)
	}
}

// An answer from ctrld that refuses the read (here: not found, as for a
// deployment deleted while its history is shown) is said as ctrld's
// answer: the rows are not marked stale, nothing says ctrld is
// unreachable, and the connection is not reset.
func TestARefusedReadIsNotAnOutage(t *testing.T) {
	op := &fakeOperator{}
	reconnects := 0
	m := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true, Reconnect: func() { reconnects++ }}))
	op.mu.Lock()
	op.refusal = status.Error(codes.NotFound, `deployment "api" not found`)
	op.mu.Unlock()
	next, cmd := m.Update(tea.KeyPressMsg{Code: tea.KeyTab})
	m = next.(tui.Model)
	next, _ = m.Update(cmd())
	m = next.(tui.Model)
	got := m.Content()
	if strings.Contains(got, "STALE") || strings.Contains(got, "unreachable") {
		t.Errorf("a refused read shown as an outage:\n%s", got)
	}
	if !strings.Contains(got, `not found`) {
		t.Errorf("ctrld's answer is not shown:\n%s", got)
	}
	if reconnects != 0 {
		t.Errorf("a refused read reset the connection %d times", reconnects)
	}
}

// In the dev stack, a component that died is said on the status line, with
// how to restart it, until it is restarted (its notice file removed).
func TestDevStackNoticeShownUntilRemoved(t *testing.T) {
	dir := t.TempDir()
	notice := filepath.Join(dir, "agentd-us-east")
	m := tui.New(&fakeOperator{}, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }, Notices: dir})
	tick := func() {
		t.Helper()
		for _, msg := range results(m.Init()) { // a refresh: the page's read and the notices
			next, _ := m.Update(msg)
			m = next.(tui.Model)
		}
	}
	tick()
	if strings.Contains(m.Content(), "dev stack") {
		t.Fatalf("a notice without a dead component:\n%s", m.Content())
	}
	if err := os.WriteFile(notice, []byte("agentd-us-east exited (exit status 2) at 12:00:00 — go run ./scripts/devstack restart agentd-us-east\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tick()
	if got := m.Content(); !strings.Contains(got, "dev stack: agentd-us-east exited (exit status 2)") || !strings.Contains(got, "devstack restart agentd-us-east") {
		t.Fatalf("the dead component is not said:\n%s", got)
	}
	os.Remove(notice)
	tick()
	if strings.Contains(m.Content(), "dev stack") {
		t.Fatalf("the notice stayed after the restart:\n%s", m.Content())
	}
}

// On the deployments page, h opens a deployment's history; r there rolls
// back to the selected revision after a confirmation that says what
// changes, or, on the newest revision, asks ctrld for its default (to 0),
// the newest earlier revision with another spec or other replicas: here
// 2, as 3 only stopped a region, which a rollback does not undo.
func TestRollbackFromHistory(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
	waitFor(t, tm, "WORKFLOW")
	keys(tm, press('h'))
	waitFor(t, tm, "history of api")
	keys(tm, down, down, press('r'))
	// What changes is checked in the confirm-rollback goldens.
	waitFor(t, tm, "Roll back deployment api to revision 2 (now 4)?")
	keys(tm, press('n'))
	waitFor(t, tm, "cancelled: roll back api to revision 2")
	keys(tm, press('k'), press('k'), press('r')) // the newest
	waitFor(t, tm, "revision 2, as far as")
	keys(tm, press('y'))
	waitFor(t, tm, "rolled back api to revision 2; now revision 5")
	calls := op.calls()
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	if c := calls[0].(*ctrlv1.RollbackDeploymentRequest); c.DeploymentId != "api" || c.ToRevision != 0 {
		t.Fatalf("call %v", c)
	}
}
