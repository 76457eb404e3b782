package rolloutcheck_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// canaryThenEveryOther is a strategy of two waves: eu (its bake the
// least there is, rollout.MinBake), then us and ap.
var canaryThenEveryOther = &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
	{Regions: []string{"eu"}, Deadline: durationpb.New(2 * time.Minute)},
	{Regions: []string{"*"}, Deadline: durationpb.New(2 * time.Minute)},
}}

// fleetNames are the deployments the fleet test rolls out at once.
func fleetNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("svc-%02d", i))
	}
	return out
}

// updateAll gives every deployment image under canaryThenEveryOther,
// through op.
func updateAll(t *testing.T, op ctrlv1.OperatorServiceClient, names []string, image string, extra func(*ctrlv1.UpdateDeploymentRequest)) {
	t.Helper()
	for _, name := range names {
		img := image + name
		req := &ctrlv1.UpdateDeploymentRequest{DeploymentId: name, Image: &img, Rollout: canaryThenEveryOther}
		if extra != nil {
			extra(req)
		}
		if _, err := op.UpdateDeployment(context.Background(), req); err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
	}
}

// rolloutsOf reads the newest rollout of each deployment.
func rolloutsOf(t *testing.T, op ctrlv1.OperatorServiceClient, names []string) map[string]*ctrlv1.Rollout {
	t.Helper()
	out := map[string]*ctrlv1.Rollout{}
	for _, name := range names {
		r, err := op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: name})
		if err != nil {
			t.Fatalf("rollout of %s: %v", name, err)
		}
		out[name] = r.Rollout
	}
	return out
}

// carriedAfter is the regions (of those given) whose StatefulSet of
// deployment name first carried image after since, as the API servers'
// watches saw it.
func (s *stack) carriedAfter(name, image string, since time.Time, regions ...string) []string {
	var out []string
	for _, region := range regions {
		for _, seen := range s.logs[region].Sightings(name, image) {
			if seen.At.After(since) {
				out = append(out, fmt.Sprintf("%s at %s", region, seen.At.Format(time.StampMilli)))
				break
			}
		}
	}
	return out
}

// Twenty deployments roll out at once, with two ctrld replicas driving:
// a halt through one replica stops every one of them (the API servers'
// watches see no later wave start), and its resume restarts exactly the
// rollouts it paused; a closed freeze window queues every new rollout,
// and a break-glass takes one through it; a pacing bound holds, as the
// rollouts' own rows show, while both replicas start queued rollouts.
func TestFleetControlsHoldTwentyRolloutsAcrossReplicas(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	other := s.env.StartReplica() // its driver runs too
	op := ctrlv1.NewOperatorServiceClient(servertest.Dial(t, other.Addr, s.env.OperatorToken("oncall")))
	names := fleetNames(20)
	for _, name := range names {
		if _, err := s.op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: name, WorkspaceId: "acme", EnvironmentId: "fleet",
			Image: "ghcr.io/acme/v1:" + name, CpuMillicores: 10, MemoryMib: 16, Regions: regions, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		s.waitReady(t, name, "ghcr.io/acme/v1:"+name, 1, 2*time.Minute)
	}

	// One rollout an operator pauses on purpose; then, with every
	// canary baking, a halt of everything through the other replica.
	updateAll(t, s.op, names, "ghcr.io/acme/v2:", nil)
	if _, err := s.op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: names[0], Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "every canary baking", func() bool {
		for _, name := range names[1:] {
			r, err := s.op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: name})
			if err != nil || r.Rollout.Regions[0].State != "baking" {
				return false
			}
		}
		return true
	})
	if _, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a halt without a reason: %v, want InvalidArgument", err)
	}
	halt, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Reason: "incident 4711: error rates up in us"})
	if err != nil {
		t.Fatal(err)
	}
	halted := time.Now()
	if got := halt.Halt.Paused; got != int32(len(names)-1) {
		t.Fatalf("the halt paused %d rollouts, want %d (all but the one paused already)", got, len(names)-1)
	}
	// Longer than a bake: with no halt, every second wave would start.
	time.Sleep(8 * time.Second)
	for _, name := range names {
		if seen := s.carriedAfter(name, "ghcr.io/acme/v2:"+name, halted.Add(-time.Hour), "us", "ap"); len(seen) > 0 {
			t.Errorf("%s reached %v during the halt", name, seen)
		}
	}
	for name, r := range rolloutsOf(t, op, names) {
		if r.State != "paused" || (name != names[0]) != (r.HaltId == halt.Halt.Id) {
			t.Errorf("%s during the halt: %s, halt %d (%s)", name, r.State, r.HaltId, r.Held)
		}
	}
	resumed, err := op.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{HaltId: halt.Halt.Id})
	if err != nil || resumed.Resumed != int32(len(names)-1) {
		t.Fatalf("resume: %v, %v; want %d resumed", resumed, err, len(names)-1)
	}
	for _, name := range names[1:] {
		if r := s.waitRollout(t, name, 3*time.Minute); r.State != "succeeded" {
			t.Fatalf("%s after the resume: %s (%s)", name, r.State, r.Reason)
		}
	}
	if r := rolloutsOf(t, op, names[:1])[names[0]]; r.State != "paused" {
		t.Fatalf("the rollout paused on purpose: %s after the halt's resume, want still paused", r.State)
	}
	if _, err := s.op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: names[0], Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT}); err != nil {
		t.Fatal(err)
	}
	s.waitRollout(t, names[0], time.Minute)

	// A freeze of the environment: new rollouts wait, queued, and no
	// canary gets the spec; a break-glass takes one through.
	now, err := op.GetFleet(ctx, &ctrlv1.GetFleetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	window := &ctrlv1.FreezeWindow{Name: "launch-week", Scope: &ctrlv1.FleetScope{WorkspaceId: "acme", EnvironmentId: "fleet"},
		StartsAt: now.Now, EndsAt: timestamppb.New(now.Now.AsTime().Add(time.Hour)), TimeZone: "Europe/Berlin", Reason: "launch week"}
	if _, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: &ctrlv1.FreezeWindow{Name: "x", Schedule: "0 17 * * 1-5",
		Duration: durationpb.New(time.Hour), TimeZone: "Europe/Atlantis"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a window in an unknown time zone: %v, want InvalidArgument", err)
	}
	if _, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: window}); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	updateAll(t, s.op, names, "ghcr.io/acme/v3:", nil)
	for name, r := range rolloutsOf(t, op, names) {
		if r.State != "queued" || r.HeldKind != "freeze" {
			t.Fatalf("%s in the freeze: %s, held %q, want queued by the window", name, r.State, r.Held)
		}
	}
	if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: names[1], Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS,
		Reason: "the fix for incident 4711"}); err != nil {
		t.Fatal(err)
	}
	if r := s.waitRollout(t, names[1], 3*time.Minute); r.State != "succeeded" || r.BreakGlassBy != "oncall" {
		t.Fatalf("the break-glass rollout: %s by %q (%s)", r.State, r.BreakGlassBy, r.Reason)
	}
	for _, name := range names {
		if seen := s.carriedAfter(name, "ghcr.io/acme/v3:"+name, frozen, regions...); (name == names[1]) != (len(seen) == 3) {
			t.Errorf("%s in the freeze reached %v", name, seen)
		}
	}
	if _, err := op.DeleteFreezeWindow(ctx, &ctrlv1.DeleteFreezeWindowRequest{Name: "launch-week"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if r := s.waitRollout(t, name, 3*time.Minute); r.State != "succeeded" {
			t.Fatalf("%s after the freeze: %s (%s)", name, r.State, r.Reason)
		}
	}

	// Pacing: at most 3 rollouts started at once in acme/fleet, whichever
	// replica starts the queued ones.
	paced := names[:6]
	if _, err := op.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: &ctrlv1.FleetScope{WorkspaceId: "acme", EnvironmentId: "fleet"}, Max: 0}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bound of 0: %v, want InvalidArgument", err)
	}
	if _, err := op.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: &ctrlv1.FleetScope{WorkspaceId: "acme", EnvironmentId: "fleet"}, Max: 3}); err != nil {
		t.Fatal(err)
	}
	updateAll(t, s.op, paced, "ghcr.io/acme/v4:", nil)
	for _, name := range paced {
		if r := s.waitRollout(t, name, 4*time.Minute); r.State != "succeeded" {
			t.Fatalf("%s under pacing: %s (%s)", name, r.State, r.Reason)
		}
	}
	if most := mostAtOnce(t, s.env.DB.Ent, paced); most != 3 {
		t.Errorf("at most %d rollouts ran at once under a bound of 3; want exactly 3 (6 queued)", most)
	}
	for _, region := range regions {
		if gaps := s.logs[region].Gaps(); len(gaps) > 0 {
			t.Errorf("%s's image log has gaps, so it proves nothing for them: %v", region, gaps)
		}
	}
}

// mostAtOnce is the most of the deployments' newest rollouts that ran at
// once, each from its first wave's promotion to its end, as its row says
// (both times the database's clock).
func mostAtOnce(t *testing.T, c *ent.Client, names []string) int {
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, name := range names {
		r, err := c.Rollout.Query().Where(rollout.DeploymentID(name)).Order(ent.Desc(rollout.FieldID)).First(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		started := r.Regions["eu"].PromotedAt
		if started == nil || r.FinishedAt == nil {
			t.Fatalf("%s's rollout: promoted %v, finished %v", name, started, r.FinishedAt)
		}
		edges = append(edges, edge{*started, 1}, edge{*r.FinishedAt, -1})
	}
	// An end and a start at the same instant: the end first.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	most, running := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	return most
}
