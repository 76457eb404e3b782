package desired_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
)

// images is the image each region of a deployment is to run ("" for
// nothing), read from the topologies.
func images(t *testing.T, client *ent.Client, id string) map[string]string {
	t.Helper()
	tops, err := client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(id)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, top := range tops {
		out[top.Region] = top.Image
	}
	return out
}

var canaryThenRest = jsontype.Strategy{Waves: []jsontype.Wave{
	{Regions: []string{"eu-west"}, BakeSeconds: 60},
	{Regions: []string{desired.EveryOtherRegion}},
}}

func inFlight(t *testing.T, client *ent.Client, id string) *ent.Rollout {
	t.Helper()
	r, err := client.Rollout.Query().Where(rollout.InFlight(id)).Only(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// An update under a strategy of waves gives the new spec to the first
// wave only; the others keep running the old one until a step promotes
// them. Stream, full sync and checkers read the regions' own copies.
func TestAnUpdateInWavesReachesTheFirstWaveOnly(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	all := []string{"ap-south", "eu-west", "us-east"}
	if err := s.Deploy(ctx, spec("api"), all, 2); err != nil {
		t.Fatal(err)
	}
	v2 := "ghcr.io/acme/api:v2"
	if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), "api", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"eu-west": v2, "us-east": "ghcr.io/acme/api:v1", "ap-south": "ghcr.io/acme/api:v1"}
	if got := images(t, client, "api"); !maps.Equal(got, want) {
		t.Fatalf("after the update: %v, want %v", got, want)
	}
	r := inFlight(t, client, "api")
	if r.State != rollout.StateProgressing || len(r.Strategy.Waves) != 2 || !slices.Equal(r.Strategy.Waves[1].Regions, []string{"ap-south", "us-east"}) {
		t.Fatalf("rollout %s with waves %+v", r.State, r.Strategy.Waves)
	}
	if r.Regions["eu-west"].State != desired.RegionProgressing || r.Regions["us-east"].State != desired.RegionWaiting || r.Regions["eu-west"].Version == 0 {
		t.Fatalf("regions %+v", r.Regions)
	}

	// A second update while it is in flight is refused and changes nothing.
	v3 := "ghcr.io/acme/api:v3"
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &v3}); !errors.Is(err, desired.ErrRolloutInFlight) {
		t.Fatalf("update during a rollout: %v, want ErrRolloutInFlight", err)
	}
	if _, _, err := s.Rollback(ctx, "api", 0); !errors.Is(err, desired.ErrRolloutInFlight) {
		t.Fatalf("rollback during a rollout: %v, want ErrRolloutInFlight", err)
	}
	// Scale stays immediate.
	if err := s.Scale(ctx, "api", "us-east", 4); err != nil {
		t.Fatal(err)
	}

	// The wave passes: the rest get it, and the rollout ends after them.
	step := desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}
	if err := s.StepRollout(ctx, step); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "api"); got["us-east"] != v2 || got["ap-south"] != v2 {
		t.Fatalf("after the first wave passed: %v", got)
	}
	// The same step again (another replica that read the same version)
	// changes nothing.
	if err := s.StepRollout(ctx, step); !errors.Is(err, desired.ErrConcurrentChange) {
		t.Fatalf("a step at an old version: %v, want ErrConcurrentChange", err)
	}
	r = inFlight(t, client, "api")
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}); err != nil {
		t.Fatal(err)
	}
	done, err := client.Rollout.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != rollout.StateSucceeded || done.InFlight != nil || done.FinishedAt == nil {
		t.Fatalf("after the last wave: %s, in flight %v", done.State, done.InFlight)
	}
	// Now an update may start.
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &v3}); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "api"); got["eu-west"] != v3 || got["ap-south"] != v3 {
		t.Fatalf("an immediate update after the rollout: %v", got)
	}
}

// A failed wave rolls back what the rollout promoted, and only that: the
// regions it never reached get no change at all.
func TestAHaltRollsBackThePromotedRegionsOnly(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"ap-south", "eu-west", "us-east"}, 2); err != nil {
		t.Fatal(err)
	}
	bad := "ghcr.io/acme/api:crashloop"
	if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), "api", desired.SpecUpdate{Image: &bad}); err != nil {
		t.Fatal(err)
	}
	untouched := map[string]int{}
	for _, region := range []string{"us-east", "ap-south"} {
		untouched[region] = len(regionChanges(t, client, "api", region))
	}
	r := inFlight(t, client, "api")
	regions := maps.Clone(r.Regions)
	regions["eu-west"] = jsontype.RegionRollout{State: desired.RegionFailed, Why: "2 of 2 instances CrashLoopBackOff"}
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: regions, Halt: true,
		Reason: "wave 1 of 2 failed: eu-west: 2 of 2 instances CrashLoopBackOff"}); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "api"); got["eu-west"] != "ghcr.io/acme/api:v1" {
		t.Fatalf("the canary after the rollback: %v", got)
	}
	for region, n := range untouched {
		if got := len(regionChanges(t, client, "api", region)); got != n {
			t.Errorf("%s got %d change rows from the rollback; it never had the bad spec", region, got-n)
		}
	}
	dep, err := client.Deployment.Get(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	if dep.Image != "ghcr.io/acme/api:v1" {
		t.Errorf("the deployment's spec after the rollback: %s", dep.Image)
	}
	ended, _ := client.Rollout.Get(ctx, r.ID)
	if ended.State != rollout.StateRolledBack || ended.InFlight != nil {
		t.Errorf("rollout %s", ended.State)
	}
	record, err := client.AuditLog.Query().Where(auditlog.Action("rollout.rollback")).Only(ctx)
	if err != nil {
		t.Fatalf("the rollback's audit record: %v", err)
	}
	if record.Actor != desired.RolloutActor || record.Target != "api" || !contains(record.Detail, "CrashLoopBackOff") {
		t.Errorf("audit record %+v", record)
	}
	revs, _, err := s.History(ctx, "api", 1)
	if err != nil || revs[0].Action != desired.ActionRollback || revs[0].Actor != desired.RolloutActor || revs[0].Image != "ghcr.io/acme/api:v1" {
		t.Fatalf("the newest revision: %+v, %v", revs, err)
	}
}

// A new deployment rolled out in waves runs nothing in the regions its
// rollout has not reached, and nothing anywhere after a rollback.
func TestADeployInWavesRunsNothingAheadOfItsRollout(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithStrategy(context.Background(), canaryThenRest)
	if err := s.Deploy(ctx, spec("api"), []string{"ap-south", "eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "api"); got["eu-west"] != "ghcr.io/acme/api:v1" || got["us-east"] != "" || got["ap-south"] != "" {
		t.Fatalf("after the deploy: %v", got)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "api"); got["eu-west"] != "" {
		t.Fatalf("after the abort: %v", got)
	}
}

// Operators pause, resume, promote and abort; each is refused where it
// makes no sense, with a clear error.
func TestOperatorsControlARollout(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutPause); !errors.Is(err, desired.ErrNotFound) {
		t.Fatalf("pause of a missing deployment: %v", err)
	}
	if err := s.Deploy(ctx, spec("api"), []string{"ap-south", "eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutPause); !errors.Is(err, desired.ErrNoRollout) {
		t.Fatalf("pause with none in flight: %v", err)
	}
	v2 := "ghcr.io/acme/api:v2"
	if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), "api", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "api", "skip"); !errors.Is(err, desired.ErrInvalid) {
		t.Fatalf("an unknown action: %v", err)
	}
	r, err := s.ControlRollout(ctx, "api", desired.RolloutPause)
	if err != nil || r.State != rollout.StatePaused {
		t.Fatalf("pause: %v, %v", r, err)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutPause); !errors.Is(err, desired.ErrConflict) {
		t.Fatalf("pause of a paused rollout: %v", err)
	}
	if r, err = s.ControlRollout(ctx, "api", desired.RolloutResume); err != nil || r.State != rollout.StateProgressing {
		t.Fatalf("resume: %v, %v", r, err)
	}
	if r, err = s.ControlRollout(ctx, "api", desired.RolloutPromote); err != nil || r.Wave != 1 {
		t.Fatalf("promote: %v, %v", r, err)
	}
	if got := images(t, client, "api"); got["us-east"] != v2 {
		t.Fatalf("after promote: %v", got)
	}
	if r, err = s.ControlRollout(ctx, "api", desired.RolloutAbort); err != nil || r.State != rollout.StateRolledBack {
		t.Fatalf("abort: %v, %v", r, err)
	}
	for region, image := range images(t, client, "api") {
		if image != "ghcr.io/acme/api:v1" {
			t.Errorf("%s runs %s after the abort", region, image)
		}
	}
}

// Strategies are checked before anything is written.
func TestBadStrategiesAreRefused(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	before := len(changes(t, client))
	v2 := "ghcr.io/acme/api:v2"
	for name, bad := range map[string]jsontype.Strategy{
		"a region twice":        {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}}, {Regions: []string{"eu-west"}}}},
		"an empty wave":         {Waves: []jsontype.Wave{{}}},
		"a bad region":          {Waves: []jsontype.Wave{{Regions: []string{"EU WEST"}}}},
		"negative bake":         {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}, BakeSeconds: -1}}},
		"all may fail":          {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}, MaxFailures: 1}}},
		"an unknown reaction":   {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}}}, OnFailure: "ignore"},
		"a deadline of a year":  {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}, DeadlineSeconds: 365 * 86400}}},
		"a bake that overflows": {Waves: []jsontype.Wave{{Regions: []string{"eu-west"}, BakeSeconds: 18446744074}}},
	} {
		if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, bad), "api", desired.SpecUpdate{Image: &v2}); !errors.Is(err, desired.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if after := len(changes(t, client)); after != before {
		t.Errorf("refused updates wrote %d change rows", after-before)
	}
}

func regionChanges(t *testing.T, client *ent.Client, id, region string) []string {
	t.Helper()
	var out []string
	for _, c := range changes(t, client) {
		if c == "deployment_topology/"+id+"/"+region {
			out = append(out, c)
		}
	}
	return out
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A resume starts the wave's clock again: a deadline that ran out while
// the rollout was paused does not fail its regions at once.
func TestResumeGivesTheWaveANewDeadline(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	v2 := "ghcr.io/acme/api:v2"
	if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), "api", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutPause); err != nil {
		t.Fatal(err)
	}
	r := inFlight(t, client, "api")
	long := time.Now().Add(-time.Hour)
	r.Regions["eu-west"] = jsontype.RegionRollout{State: desired.RegionProgressing, PromotedAt: &long, Version: r.Regions["eu-west"].Version}
	client.Rollout.UpdateOneID(r.ID).SetRegions(r.Regions).ExecX(ctx)
	resumed, err := s.ControlRollout(ctx, "api", desired.RolloutResume)
	if err != nil {
		t.Fatal(err)
	}
	if at := resumed.Regions["eu-west"].PromotedAt; at == nil || time.Since(*at) > time.Minute {
		t.Errorf("eu-west's deadline counts from %v after the resume, want from now", at)
	}
}
