package cluster_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// checksEnv is a real ctrld with api (app:1) in ap, eu and us, updating to
// app:2 under a canary (eu) with an error-rate check and a baseline
// check. No agent applies anything: eu never turns healthy, so only a
// check can end its wave.
func checksEnv(t *testing.T) (*servertest.Env, ctrlv1.OperatorServiceClient) {
	t.Helper()
	env := servertest.Start(t, server.Config{})
	for _, r := range []string{"ap", "eu", "us"} {
		env.AgentToken(r)
	}
	op := env.Operator("dana")
	ctx := context.Background()
	_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod", Image: "app:1",
		CpuMillicores: 100, MemoryMib: 64, Regions: []string{"ap", "eu", "us"}, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	image := "app:2"
	_, err = op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: &ctrlv1.RolloutStrategy{
		Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Bake: durationpb.New(time.Minute)}, {Regions: []string{"*"}}},
		Checks: []*ctrlv1.RolloutCheck{
			{Name: "error-rate", Kind: "metric", Bound: "< 0.01", Interval: durationpb.New(time.Second),
				Query: `sum(rate(requests_total{namespace={{namespace}},deployment={{deployment}},spec_hash={{spec_hash}},code="500"}[10s]))`},
			{Name: "vs-old", Kind: "baseline", Tolerance: 0.5, Interval: durationpb.New(time.Second),
				Query: `sum(rate(requests_total{deployment={{deployment}},region={{region}},spec_hash={{spec_hash}},code="500"}[10s]))`},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	return env, op
}

// assigned is what region's agent is to evaluate, by the check and role
// its ID names.
func assigned(t *testing.T, agent ctrlv1.ClusterServiceClient, region string, results ...*ctrlv1.CheckResult) map[string]*ctrlv1.CheckAssignment {
	t.Helper()
	resp, err := agent.SyncChecks(context.Background(), &ctrlv1.SyncChecksRequest{Region: region, Results: results})
	if err != nil {
		t.Fatalf("SyncChecks of %s: %v", region, err)
	}
	out := map[string]*ctrlv1.CheckAssignment{}
	for _, a := range resp.Checks {
		parts := strings.Split(a.Id, "/")
		out[parts[1]+"/"+parts[2]] = a
	}
	return out
}

// The canary evaluates its checks of the new spec; the regions still on
// the old one evaluate the baseline check of theirs, with the identity
// filled in as PromQL strings.
func TestAgentsAreAssignedTheirRegionsChecks(t *testing.T) {
	env, _ := checksEnv(t)
	eu := assigned(t, env.Agent("eu"), "eu")
	if len(eu) != 3 || eu["error-rate/canary"] == nil || eu["vs-old/canary"] == nil || eu["vs-old/before"] == nil {
		t.Fatalf("eu is assigned %v, want its two checks as the canary, and the baseline check's value before its promotion", keys(eu))
	}
	if eu["vs-old/before"].At == nil || eu["vs-old/canary"].At != nil {
		t.Fatalf("before: at %v, canary: at %v; want an instant for before alone", eu["vs-old/before"].At, eu["vs-old/canary"].At)
	}
	ns := naming.Namespace("ws", "prod")
	q := eu["error-rate/canary"].Query
	if !strings.Contains(q, `namespace="`+ns+`"`) || !strings.Contains(q, `deployment="api"`) || strings.Contains(q, "{{") {
		t.Fatalf("eu's query %s: want its identity filled in", q)
	}
	if eu["error-rate/canary"].Interval.AsDuration() != time.Second {
		t.Fatalf("interval %s, want the check's 1s", eu["error-rate/canary"].Interval.AsDuration())
	}
	us := assigned(t, env.Agent("us"), "us")
	if len(us) != 1 || us["vs-old/baseline"] == nil || !strings.Contains(us["vs-old/baseline"].Query, `region="us"`) {
		t.Fatalf("us is assigned %v, want the baseline check alone", keys(us))
	}
	if us["vs-old/baseline"].Query == strings.ReplaceAll(eu["vs-old/canary"].Query, `region="eu"`, `region="us"`) {
		t.Fatal("the baseline query asks about the new spec's hash, want the old one's")
	}
}

// A canary whose error rate is past its bound fails its wave, and the
// rollout rolls back with the numbers in its reason; a baseline check
// compares with the regions still on the old revision.
func TestAFailingCheckRollsTheCanaryBackWithItsNumbers(t *testing.T) {
	env, op := checksEnv(t)
	ctx := context.Background()
	eu, us, ap := env.Agent("eu"), env.Agent("us"), env.Agent("ap")
	euIDs := assigned(t, eu, "eu")
	usIDs, apIDs := assigned(t, us, "us"), assigned(t, ap, "ap")
	assigned(t, us, "us", &ctrlv1.CheckResult{Id: usIDs["vs-old/baseline"].Id, HasValue: true, Value: 0.002})
	assigned(t, ap, "ap", &ctrlv1.CheckResult{Id: apIDs["vs-old/baseline"].Id, HasValue: true, Value: 0.004})
	// Within the error-rate bound, but three times the old revision's.
	assigned(t, eu, "eu",
		&ctrlv1.CheckResult{Id: euIDs["error-rate/canary"].Id, HasValue: true, Value: 0.009},
		&ctrlv1.CheckResult{Id: euIDs["vs-old/canary"].Id, HasValue: true, Value: 0.009})
	var r *ctrlv1.Rollout
	eventually.True(t, 10*time.Second, "the rollout rolled back", func() bool {
		got, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
		r = got.GetRollout()
		return err == nil && r.State == "rolled_back"
	})
	want := "eu: check vs-old: 0.009 > 0.0045 (baseline ap, us 0.003), 1 failing evaluation(s), 0 allowed"
	if !strings.Contains(r.Reason, want) {
		t.Fatalf("reason %q, want it to name the check and the numbers: %q", r.Reason, want)
	}
	for _, c := range r.Regions[0].Checks {
		if c.Name == "vs-old" && (c.Verdict != "failed" || c.Baseline != 0.003 || c.BaselineFrom != "ap, us" || c.Value != 0.009 || c.Bound != "<= 0.0045") {
			t.Fatalf("eu's vs-old as the rollout shows it: %+v", c)
		}
		if c.Name == "error-rate" && c.Verdict == "failed" {
			t.Fatalf("error-rate 0.009 < 0.01 failed: %+v", c)
		}
	}
	// Rolled back: nothing is assigned any more, once the replica's read
	// of the rollouts (a second old at most) has caught up.
	eventually.True(t, 5*time.Second, "no assignment after the rollback", func() bool { return len(assigned(t, eu, "eu")) == 0 })
}

// Results of checks a region is not assigned (another region's, a made
// up one, an ended rollout's) are dropped; too many at once are refused;
// a region's token speaks for its region only.
func TestResultsAreKeptOnlyForWhatWasAssigned(t *testing.T) {
	env, op := checksEnv(t)
	ctx := context.Background()
	eu, us := env.Agent("eu"), env.Agent("us")
	euIDs := assigned(t, eu, "eu")
	bad := &ctrlv1.CheckResult{Id: euIDs["error-rate/canary"].Id, HasValue: true, Value: 1}
	// us sends eu's assignment: not one of us's, so nothing is kept.
	assigned(t, us, "us", bad, &ctrlv1.CheckResult{Id: "1/made-up/canary", HasValue: true, Value: 1})
	if _, err := us.SyncChecks(ctx, &ctrlv1.SyncChecksRequest{Region: "eu", Results: []*ctrlv1.CheckResult{bad}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("us's token speaking for eu: %v, want PermissionDenied", err)
	}
	many := make([]*ctrlv1.CheckResult, 257)
	for i := range many {
		many[i] = bad
	}
	if _, err := eu.SyncChecks(ctx, &ctrlv1.SyncChecksRequest{Region: "eu", Results: many}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("257 results: %v, want InvalidArgument", err)
	}
	if n := env.DB.Ent.CheckEvaluation.Query().CountX(ctx); n != 0 {
		t.Fatalf("%d evaluations kept, want none", n)
	}
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "progressing" {
		t.Fatalf("rollout %v, %v: want it progressing, untouched", r.GetRollout().GetState(), err)
	}
	// One call's repeats of one result are one row.
	repeats := make([]*ctrlv1.CheckResult, 200)
	for i := range repeats {
		repeats[i] = &ctrlv1.CheckResult{Id: euIDs["error-rate/canary"].Id, HasValue: true, Value: 0.001}
	}
	assigned(t, eu, "eu", repeats...)
	if n := env.DB.Ent.CheckEvaluation.Query().CountX(ctx); n != 1 {
		t.Fatalf("200 repeats of a result in one call kept %d rows, want 1", n)
	}
	// NaN (0/0: no traffic) is no verdict, and never a failure.
	assigned(t, eu, "eu", &ctrlv1.CheckResult{Id: euIDs["error-rate/canary"].Id, HasValue: true, Value: nanValue()})
	r, _ = op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	for _, c := range r.Rollout.Regions[0].Checks {
		if c.Name == "error-rate" && (c.Verdict != "inconclusive" || !strings.Contains(c.Why, "NaN")) {
			t.Fatalf("after a NaN: %+v, want inconclusive saying NaN", c)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func nanValue() float64 { return math.NaN() }
