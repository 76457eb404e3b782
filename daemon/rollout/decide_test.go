package rollout_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/jsontype"
)

const newHash = "new"

var start = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// healthy is a region whose agent applied change 10 and runs n ready
// instances of the new spec.
func healthy(n int) rollout.Region {
	r := rollout.Region{Present: true, Replicas: n, Connected: true, Applied: 10, Received: 10, InSync: true}
	for range n {
		r.Instances = append(r.Instances, rollout.Instance{SpecHash: newHash, Ready: true, Status: "running"})
	}
	return r
}

func canary(bake, deadline int, maxFailures int, regions ...string) *ent.Rollout {
	states := map[string]jsontype.RegionRollout{}
	for _, r := range regions {
		at := start
		states[r] = jsontype.RegionRollout{State: desired.RegionProgressing, PromotedAt: &at, Version: 10}
	}
	return &ent.Rollout{ID: 1, Version: 1, ToSpec: jsontype.Spec{Hash: newHash}, Regions: states,
		Strategy: jsontype.Strategy{OnFailure: desired.OnFailureRollback, Waves: []jsontype.Wave{
			{Regions: regions, BakeSeconds: bake, DeadlineSeconds: deadline, MaxFailures: maxFailures},
			{Regions: []string{"later"}},
		}}}
}

// apply writes a step's regions back, as the store would.
func apply(r *ent.Rollout, step desired.RolloutStep) {
	r.Regions = step.Regions
	r.Version++
}

// A region passes after it stayed healthy for the whole bake, and not
// before; an unhealthy look starts the bake again.
func TestARegionPassesAfterItsBake(t *testing.T) {
	r := canary(60, 600, 0, "eu")
	step, ok := rollout.Decide(r, map[string]rollout.Region{"eu": healthy(3)}, start.Add(time.Second))
	if !ok || step.Advance || step.Regions["eu"].State != desired.RegionBaking {
		t.Fatalf("first healthy look: %+v", step)
	}
	apply(r, step)
	if step, ok = rollout.Decide(r, map[string]rollout.Region{"eu": healthy(3)}, start.Add(30*time.Second)); ok {
		t.Fatalf("half-way through the bake: %+v (nothing changed, nothing to write)", step)
	}
	unready := healthy(3)
	unready.Instances[0].Ready = false
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": unready}, start.Add(40*time.Second))
	if st := step.Regions["eu"]; st.State != desired.RegionProgressing || st.HealthySince != nil {
		t.Fatalf("an instance not ready while baking: %+v", st)
	}
	apply(r, step)
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": healthy(3)}, start.Add(50*time.Second))
	apply(r, step)
	if step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": healthy(3)}, start.Add(100*time.Second)); step.Advance {
		t.Fatal("passed 50s into a bake of 60s that restarted at 50s")
	}
	if step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": healthy(3)}, start.Add(111*time.Second)); !step.Advance {
		t.Fatalf("not passed after a full bake: %+v", step)
	}
}

// What fails a region at once, with its evidence, and what only holds it.
func TestGate(t *testing.T) {
	with := func(change func(*rollout.Region)) rollout.Region {
		r := healthy(3)
		change(&r)
		return r
	}
	crash := func(r *rollout.Region) {
		for i := range r.Instances {
			r.Instances[i].Ready, r.Instances[i].Reason, r.Instances[i].Restarts = false, "CrashLoopBackOff", 2
		}
	}
	for _, tc := range []struct {
		name    string
		region  rollout.Region
		verdict rollout.Verdict
		why     string
	}{
		{"all ready", healthy(3), rollout.Healthy, "3 of 3"},
		{"crash-looping", with(crash), rollout.Failed, "3 of 3 instances CrashLoopBackOff (restarts 6)"},
		{"image not pulled", with(func(r *rollout.Region) { r.Instances[1].Reason = "ImagePullBackOff" }), rollout.Failed, "1 of 3 instances ImagePullBackOff"},
		{"OOM-killed", with(func(r *rollout.Region) { r.Instances[1].Reason = "OOMKilled" }), rollout.Failed, "OOMKilled"},
		{"a failed pod", with(func(r *rollout.Region) { r.Instances[1].Status = "failed" }), rollout.Failed, "Failed"},
		{"apply failed", with(func(r *rollout.Region) { r.ApplyError, r.InSync = "forbidden", false }), rollout.Failed, "apply failed: forbidden"},
		{"an old apply failure", with(func(r *rollout.Region) { r.ApplyError, r.Received, r.Applied = "forbidden", 9, 9 }), rollout.Waiting, "not applied"},
		{"unschedulable only waits", with(func(r *rollout.Region) { r.Instances[0].Ready, r.Instances[0].Reason = false, "Unschedulable" }), rollout.Waiting, "2 of 3"},
		{"an old pod left", with(func(r *rollout.Region) { r.Instances[0].SpecHash = "old" }), rollout.Waiting, "still on another"},
		{"crash-looping old pods are not the new spec's", with(func(r *rollout.Region) {
			r.Instances = append(r.Instances, rollout.Instance{SpecHash: "old", Reason: "CrashLoopBackOff"})
		}), rollout.Waiting, "still on another"},
		{"paused", with(func(r *rollout.Region) { r.Paused = true }), rollout.Waiting, "paused"},
		{"agent away", with(func(r *rollout.Region) { r.Connected = false }), rollout.Waiting, "not connected"},
		{"not applied yet", with(func(r *rollout.Region) { r.Applied = 9 }), rollout.Waiting, "not applied"},
		{"stopped", rollout.Region{Present: true, Stopped: true}, rollout.Healthy, "stopped"},
		{"scaled to 0", rollout.Region{Present: true, Connected: true, Applied: 10, Received: 10, InSync: true}, rollout.Healthy, "scaled to 0"},
		{"gone", rollout.Region{}, rollout.Healthy, "no longer runs"},
	} {
		verdict, why, _ := rollout.Gate(tc.region, newHash, 10)
		if verdict != tc.verdict || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %v %q, want %v with %q", tc.name, verdict, why, tc.verdict, tc.why)
		}
	}
}

// A failure beyond max_failures halts the wave with the evidence; within
// it, the wave passes once the others have.
func TestAWaveFailsBeyondItsMaxFailures(t *testing.T) {
	crashing := healthy(2)
	for i := range crashing.Instances {
		crashing.Instances[i].Ready, crashing.Instances[i].Reason = false, "CrashLoopBackOff"
	}
	r := canary(0, 600, 0, "eu")
	step, ok := rollout.Decide(r, map[string]rollout.Region{"eu": crashing}, start.Add(time.Second))
	if !ok || !step.Halt || !strings.Contains(step.Reason, "eu: 2 of 2 instances CrashLoopBackOff") {
		t.Fatalf("a crash-looping canary: %+v", step)
	}
	r = canary(0, 600, 1, "eu", "us")
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": crashing, "us": healthy(1)}, start.Add(time.Second))
	if step.Halt || !step.Advance {
		t.Fatalf("one failure of two with max_failures 1: %+v", step)
	}
}

// A region that does not turn healthy within its deadline fails, saying
// what it waited for; a paused region or an absent agent holds the wave
// until then, never skipped.
func TestTheDeadlineFailsARegionThatHolds(t *testing.T) {
	away := healthy(1)
	away.Connected = false
	r := canary(0, 300, 0, "eu")
	if step, _ := rollout.Decide(r, map[string]rollout.Region{"eu": away}, start.Add(299*time.Second)); step.Halt || step.Advance {
		t.Fatalf("before the deadline: %+v", step)
	}
	step, _ := rollout.Decide(r, map[string]rollout.Region{"eu": away}, start.Add(301*time.Second))
	if !step.Halt || !strings.Contains(step.Reason, "deadline of 5m0s") || !strings.Contains(step.Reason, "not connected") {
		t.Fatalf("after the deadline: %+v", step)
	}
}

// An instance restarting while its region bakes fails the region.
func TestARestartWhileBakingFails(t *testing.T) {
	r := canary(60, 600, 0, "eu")
	step, _ := rollout.Decide(r, map[string]rollout.Region{"eu": healthy(1)}, start.Add(time.Second))
	apply(r, step)
	restarted := healthy(1)
	restarted.Instances[0].Restarts = 1
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": restarted}, start.Add(20*time.Second))
	if !step.Halt || !strings.Contains(step.Reason, "restarted while baking") {
		t.Fatalf("a restart while baking: %+v", step)
	}
}
