package tui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fleetOperator is fakeOperator with a fleet: a halt everywhere that
// paused api, a weekend freeze closed now that holds batch queued, a
// pacing bound in eu-west, and worker taken through by a break-glass.
type fleetOperator struct {
	*fakeOperator
	rollout *ctrlv1.Rollout // GetRollout's answer for its deployment, when set
}

func fleetRollouts() []*ctrlv1.Rollout {
	strategy := &ctrlv1.RolloutStrategy{OnFailure: "rollback", Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"eu-west"}, Bake: durationpb.New(time.Minute)}, {Regions: []string{"us-east", "ap-south"}}}}
	rollout := func(id int64, dep, state string) *ctrlv1.Rollout {
		return &ctrlv1.Rollout{Id: id, Version: 3, DeploymentId: dep, Revision: 4, FromRevision: 3, ToImage: dep + ":v4", State: state, Wave: 1,
			Strategy: strategy, Actor: "alice", CreatedAt: at(time.Minute), WorkspaceId: "acme", EnvironmentId: "prod",
			Regions: []*ctrlv1.RolloutRegion{{Region: "eu-west", Wave: 1, State: "progressing"}, {Region: "us-east", Wave: 2, State: "waiting"},
				{Region: "ap-south", Wave: 2, State: "waiting"}}}
	}
	api := rollout(11, "api", "paused")
	api.HaltId, api.HeldKind = 3, "halt"
	api.Reason, api.Held = "paused by halt #3 (carol: incident 4711)", "paused by halt #3 (carol: incident 4711)"
	batch := rollout(12, "batch", "queued")
	batch.Held, batch.HeldKind = "frozen until Mon 09:00 CET by window weekend", "freeze"
	worker := rollout(13, "worker", "progressing")
	worker.BreakGlassBy, worker.BreakGlassReason = "dave", "hotfix for incident 4711"
	web := rollout(14, "web", "progressing")
	web.EnvironmentId = "stage"
	return []*ctrlv1.Rollout{api, batch, worker, web}
}

func (f *fleetOperator) GetFleet(context.Context, *ctrlv1.GetFleetRequest, ...grpc.CallOption) (*ctrlv1.GetFleetResponse, error) {
	return &ctrlv1.GetFleetResponse{Now: at(0), Rollouts: fleetRollouts(),
		Halts: []*ctrlv1.FleetHalt{{Id: 3, Scope: &ctrlv1.FleetScope{}, Reason: "incident 4711", Actor: "carol", CreatedAt: at(5 * time.Minute), Holding: 2}},
		Windows: []*ctrlv1.FreezeWindow{{Name: "weekend", Scope: &ctrlv1.FleetScope{WorkspaceId: "acme", EnvironmentId: "prod"}, Schedule: "0 17 * * 5",
			TimeZone: "Europe/Berlin", Duration: durationpb.New(64 * time.Hour), Closed: true, ClosedUntil: at(-40 * time.Hour)}},
		Bounds: []*ctrlv1.PacingBound{{Scope: &ctrlv1.FleetScope{Region: "eu-west"}, Max: 2, InUse: 2, Queued: 1}},
	}, nil
}

func (f *fleetOperator) HaltRollouts(_ context.Context, req *ctrlv1.HaltRolloutsRequest, _ ...grpc.CallOption) (*ctrlv1.HaltRolloutsResponse, error) {
	f.record(req)
	return &ctrlv1.HaltRolloutsResponse{Halt: &ctrlv1.FleetHalt{Id: 5, Scope: req.Scope, Reason: req.Reason, Paused: 2}}, nil
}

func (f *fleetOperator) ResumeRollouts(_ context.Context, req *ctrlv1.ResumeRolloutsRequest, _ ...grpc.CallOption) (*ctrlv1.ResumeRolloutsResponse, error) {
	f.record(req)
	return &ctrlv1.ResumeRolloutsResponse{Resumed: 1}, nil
}

func (f *fleetOperator) GetRollout(ctx context.Context, req *ctrlv1.GetRolloutRequest, opts ...grpc.CallOption) (*ctrlv1.GetRolloutResponse, error) {
	if f.rollout != nil && f.rollout.DeploymentId == req.DeploymentId {
		return &ctrlv1.GetRolloutResponse{Rollout: f.rollout}, nil
	}
	return f.fakeOperator.GetRollout(ctx, req, opts...)
}

// typeText types s, a key a rune.
func (c *console) typeText(s string) {
	for _, r := range s {
		c.press(press(r))
	}
}

// act presses k, which runs an action, and shows its outcome.
func (c *console) act(t *testing.T, k tea.KeyPressMsg) {
	t.Helper()
	cmd := c.update(k)
	if cmd == nil {
		t.Fatalf("%s ran nothing:\n%s", k, c.m.Content())
	}
	c.update(cmd()) // the action's outcome (its read after is not run)
}

func (c *console) shows(t *testing.T, want ...string) {
	t.Helper()
	got := words(c.m.Content())
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the console does not show %q:\n%s", w, c.m.Content())
		}
	}
}

// The fleet page (F), as on-call sees it during an incident: the halt
// that stands, the freeze window closed and until when, the pacing
// bound, and each environment's rollouts by region and state with what
// holds each. H asks for the scope and a reason and refuses to send
// without one; with one it halts the chosen scope. p on the halt lifts it.
func TestFleetPageHaltsAndLifts(t *testing.T) {
	op := &fleetOperator{fakeOperator: &fakeOperator{}}
	c := newConsole(t, op, 120)
	c.turn(press('F'))
	c.shows(t, "unkey-tui · fleet",
		"HALTS (1)", "#3 everywhere carol 5m ago 2 incident 4711",
		"FREEZE WINDOWS (1)", `weekend acme/prod "0 17 * * 5" Europe/Berlin for 64h CLOSED until`,
		"PACING BOUNDS (1)", "region eu-west first waves in progress 2/2, 1 queued",
		"IN FLIGHT (4)", "acme/prod: 1 progressing, 1 paused (1 by a halt), 1 queued", "acme/stage: 1 progressing",
		"acme/stage eu-west progressing web 1/2 -",
		"acme/prod eu-west progressing worker 1/2 break-glass by dave: hotfix for incident 4711",
		"acme/prod eu-west paused api 1/2 paused by halt #3 (carol: incident 4711)",
		"acme/prod eu-west queued batch 1/2 frozen until Mon 09:00 CET by window weekend",
		"H halt", "p lift halt")

	// H on the first rollout (worker): everywhere, its environment or
	// its region, and a reason.
	c.press(down, press('H'))
	// A break-glass one (worker) is not paused: web alone, in acme/stage.
	c.shows(t, "Halt rollouts?", "(•) everywhere (pauses 1 progressing now)", "( ) environment acme/prod (pauses 0 progressing now)",
		"( ) region eu-west (pauses 1 progressing now)", "> reason:", "[enter] confirm [esc] cancel")
	c.press(enter)
	c.shows(t, "reason: type a reason first")
	if calls := op.calls(); len(calls) != 0 {
		t.Fatalf("a halt without a reason was sent: %v", calls)
	}
	c.press(down)
	c.typeText("incident 4712: eu latency")
	c.act(t, enter)
	want := &ctrlv1.HaltRolloutsRequest{Scope: &ctrlv1.FleetScope{WorkspaceId: "acme", EnvironmentId: "prod"}, Reason: "incident 4712: eu latency"}
	if calls := op.calls(); len(calls) != 1 || !proto.Equal(calls[0], want) {
		t.Fatalf("sent %v, want %v", calls, want)
	}
	c.shows(t, "halted environment acme/prod: halt #5 paused 2; lift it from the fleet page (F)")

	// esc cancels, sending nothing.
	c.press(press('H'), press('x'), tea.KeyPressMsg{Code: tea.KeyEscape})
	c.shows(t, "cancelled: halt rollouts")

	// p on the halt asks, then lifts it.
	c.press(press('k'), press('k'), press('p'))
	c.shows(t, "Lift halt #3 (everywhere, by carol: incident 4711)?", "it holds 2 now", "[y] yes")
	c.act(t, press('y'))
	if calls := op.calls(); len(calls) != 2 || calls[1].(*ctrlv1.ResumeRolloutsRequest).GetHaltId() != 3 {
		t.Fatalf("sent %v, want a resume of halt 3", calls)
	}
	c.shows(t, "lifted halt #3: resumed 1")
}

// enter on a rollout of the fleet page opens it, and esc returns to the
// fleet page, where on-call was looking, not home.
func TestARolloutOpenedFromTheFleetReturnsToIt(t *testing.T) {
	op := &fleetOperator{fakeOperator: &fakeOperator{}, rollout: fleetRollouts()[2]} // worker
	c := newConsole(t, op, 120)
	c.turn(press('F'))
	c.press(down)
	c.turn(enter)
	c.shows(t, "unkey-tui · rollout of worker", "break-glass")
	c.turn(tea.KeyPressMsg{Code: tea.KeyEscape})
	c.shows(t, "unkey-tui · fleet", "HALTS (1)")
	c.turn(tea.KeyPressMsg{Code: tea.KeyEscape})
	if got := words(c.m.Content()); strings.Contains(got, "unkey-tui · fleet") {
		t.Errorf("esc on the fleet page did not go home:\n%s", c.m.Content())
	}
}

// :fleet opens the fleet page too; on a region H halts that region.
func TestFleetCommandAndHaltOfARegion(t *testing.T) {
	op := &fleetOperator{fakeOperator: &fakeOperator{}}
	c := newConsole(t, op, 120)
	c.turn(press(':')) // the line opens, the deployments are read
	c.typeText("fleet")
	c.turn(enter)
	c.shows(t, "unkey-tui · fleet", "HALTS (1)")

	c = newConsole(t, op, 120)
	c.turn(enter) // ap-south, the worst
	c.press(press('H'))
	c.shows(t, "( ) everywhere", "(•) region ap-south")
	c.typeText("ap-south's registry is down")
	c.act(t, enter)
	want := &ctrlv1.HaltRolloutsRequest{Scope: &ctrlv1.FleetScope{Region: "ap-south"}, Reason: "ap-south's registry is down"}
	if calls := op.calls(); len(calls) != 1 || !proto.Equal(calls[0], want) {
		t.Fatalf("sent %v, want %v", calls, want)
	}
}

// A rollout a freeze holds queued says so on its page, until when and by
// which window; B asks for the deployment's name and a reason, refuses a
// wrong name or no reason, and then breaks glass fenced by the rollout as
// shown. Promote and pause are not offered on a queued rollout.
func TestBreakGlassOnAHeldRollout(t *testing.T) {
	queued := fleetRollouts()[1] // batch
	op := &fleetOperator{fakeOperator: &fakeOperator{}, rollout: queued}
	c := newConsole(t, op, 120)
	c.turn(press(':')) // the line opens, the deployments are read
	c.typeText("rollout batch")
	c.turn(enter)
	if !strings.Contains(c.m.Content(), "rollout of batch") {
		t.Fatalf(":rollout batch did not open it:\n%s", c.m.Content())
	}
	c.shows(t, "state QUEUED, wave 1 of 2", "held: queued: frozen until Mon 09:00 CET by window weekend", "B break glass")
	if got := words(c.m.Content()); strings.Contains(got, "P promote") || strings.Contains(got, "p resume") {
		t.Errorf("a queued rollout offers promote or resume:\n%s", c.m.Content())
	}

	c.press(press('B'))
	c.shows(t, "Break glass for the rollout of batch?", "Now: frozen until Mon 09:00 CET by window weekend.",
		"> type the deployment's name (batch):", "reason:", "[tab] next field")
	c.typeText("btach")
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.typeText("fix for incident 4711")
	c.press(enter)
	c.shows(t, "type batch exactly, to say you mean it")
	for range len("btach") {
		c.press(tea.KeyPressMsg{Code: tea.KeyBackspace})
	}
	c.typeText("batch")
	if calls := op.calls(); len(calls) != 0 {
		t.Fatalf("sent before the name was right: %v", calls)
	}
	c.act(t, enter)
	want := &ctrlv1.ControlRolloutRequest{DeploymentId: "batch", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS, Reason: "fix for incident 4711",
		Fence: &ctrlv1.RolloutFence{RolloutId: 12, Revision: 4, Wave: 1, Version: 3}}
	if calls := op.calls(); len(calls) != 1 || !proto.Equal(calls[0], want) {
		t.Fatalf("sent %v, want %v", calls, want)
	}
	c.shows(t, "broke glass for the rollout of batch")

	// Without a reason it is not sent.
	c.press(press('B'))
	c.typeText("batch")
	c.press(enter)
	c.shows(t, "reason: type a reason first")
	if calls := op.calls(); len(calls) != 1 {
		t.Fatalf("a break-glass without a reason was sent: %v", calls[1:])
	}
}

// A rollout a fleet halt paused names the halt and how past it; p (resume,
// which ctrld refuses while the halt stands) is not offered.
func TestRolloutPausedByAHalt(t *testing.T) {
	op := &fleetOperator{fakeOperator: &fakeOperator{}, rollout: fleetRollouts()[0]} // api
	c := newConsole(t, op, 120)
	c.press(tab)
	c.update(tea.KeyPressMsg{}) // nothing
	c.turn(tab)
	c.turn(enter) // api's rollout, the first listed
	c.shows(t, "state PAUSED", "why: paused by halt #3 (carol: incident 4711)", "halt: #3 holds it; lift it on the fleet page (F, p), or break glass (B) for this one")
	if got := words(c.m.Content()); strings.Contains(got, "p resume") {
		t.Errorf("resume is offered on a rollout a halt holds:\n%s", c.m.Content())
	}
}

// History marks a revision a rollout rolled back for a failed gate, and
// d on it shows the evidence.
func TestHistoryMarksAFailedRevision(t *testing.T) {
	op := &failedHistoryOperator{fakeOperator: &fakeOperator{}}
	c := newConsole(t, op, 120)
	c.turn(tab) // deployments
	c.turn(press('h'))
	c.shows(t, "3 1h ago alice update FAILED (rollout 9) image ghcr.io/acme/api:v6 -> ghcr.io/acme/api:v7")
	c.press(down)
	c.shows(t, "FAILED by rollout 9: wave 1 failed: eu-west: 3 of 3 instances CrashLoopBackOff (restarts 4) (d: the evidence)", "d why it failed")
	c.turn(press('d'))
	c.shows(t, "revision 3 of api: why it failed", "revision 3 FAILED: rollout 9 rolled its spec back, on this evidence:",
		"wave 1 failed: eu-west: 3 of 3 instances CrashLoopBackOff (restarts 4)", "refused unless retried on purpose, with a reason", "rolling api back to revision 3 changes:")
}

// r on a FAILED revision asks why it is retried, refuses to send
// without a reason, and sends the reason as --retry-failed does; r on a
// revision that did not fail asks only for a yes.
func TestRollbackToAFailedRevisionAsksWhy(t *testing.T) {
	op := &failedHistoryOperator{fakeOperator: &fakeOperator{}}
	c := newConsole(t, op, 120)
	c.turn(tab) // deployments
	c.turn(press('h'))
	c.press(down, press('r'))
	c.shows(t, "Roll back deployment api to revision 3", "Its spec FAILED: rollout 9 rolled it back", "> why retry the failed spec:", "[enter] confirm [esc] cancel")
	c.press(enter)
	c.shows(t, "type why first")
	if calls := op.calls(); len(calls) != 0 {
		t.Fatalf("a retry without a reason was sent: %v", calls)
	}
	c.typeText("the registry was down, not the image")
	c.act(t, enter)
	want := &ctrlv1.RollbackDeploymentRequest{DeploymentId: "api", ToRevision: 3, RetryFailedReason: "the registry was down, not the image"}
	if calls := op.calls(); len(calls) != 1 || !proto.Equal(calls[0], want) {
		t.Fatalf("sent %v, want %v", calls, want)
	}

	c.press(down, press('r')) // revision 2: nothing failed
	c.shows(t, "Roll back deployment api to revision 2", "[y] yes")
	c.act(t, press('y'))
	if calls := op.calls(); len(calls) != 2 || calls[1].(*ctrlv1.RollbackDeploymentRequest).GetRetryFailedReason() != "" {
		t.Fatalf("sent %v, want a plain rollback to revision 2", calls)
	}
}

// failedHistoryOperator is fakeOperator whose revision 3 failed.
type failedHistoryOperator struct{ *fakeOperator }

func (f *failedHistoryOperator) GetDeploymentHistory(ctx context.Context, req *ctrlv1.GetDeploymentHistoryRequest, opts ...grpc.CallOption) (*ctrlv1.GetDeploymentHistoryResponse, error) {
	r, err := f.fakeOperator.GetDeploymentHistory(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	r.Revisions[1].Failed = "wave 1 failed: eu-west: 3 of 3 instances CrashLoopBackOff (restarts 4)"
	r.Revisions[1].FailedRolloutId = 9
	return r, nil
}
