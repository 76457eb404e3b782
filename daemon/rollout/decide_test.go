package rollout_test

import (
	"fmt"
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
// instances of the new spec, connected since before the rollout and heard
// from at start.
func healthy(n int) rollout.Region {
	r := rollout.Region{Present: true, Replicas: n, Connected: true, Applied: 10, Received: 10, InSync: true,
		Heard: start, ConnectedSince: start.Add(-time.Hour)}
	for i := range n {
		r.Instances = append(r.Instances, rollout.Instance{Pod: fmt.Sprintf("api-%d", i), SpecHash: newHash, Ready: true, Status: "running"})
	}
	return r
}

// heard is the look at region at now, its agent's last heartbeat just in.
func heard(region rollout.Region, now time.Time) map[string]rollout.Region {
	region.Heard = now
	return map[string]rollout.Region{"eu": region}
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
	step, ok := rollout.Decide(r, heard(healthy(3), start.Add(time.Second)), start.Add(time.Second))
	if !ok || step.Advance || step.Regions["eu"].State != desired.RegionBaking {
		t.Fatalf("first healthy look: %+v", step)
	}
	apply(r, step)
	if step, ok = rollout.Decide(r, heard(healthy(3), start.Add(30*time.Second)), start.Add(30*time.Second)); ok {
		t.Fatalf("half-way through the bake: %+v (nothing changed, nothing to write)", step)
	}
	unready := healthy(3)
	unready.Instances[0].Ready = false
	step, _ = rollout.Decide(r, heard(unready, start.Add(40*time.Second)), start.Add(40*time.Second))
	if st := step.Regions["eu"]; st.State != desired.RegionProgressing || st.HealthySince != nil {
		t.Fatalf("an instance not ready while baking: %+v", st)
	}
	apply(r, step)
	step, _ = rollout.Decide(r, heard(healthy(3), start.Add(50*time.Second)), start.Add(50*time.Second))
	apply(r, step)
	if step, _ = rollout.Decide(r, heard(healthy(3), start.Add(100*time.Second)), start.Add(100*time.Second)); step.Advance {
		t.Fatal("passed 50s into a bake of 60s that restarted at 50s")
	}
	if step, _ = rollout.Decide(r, heard(healthy(3), start.Add(111*time.Second)), start.Add(111*time.Second)); !step.Advance {
		t.Fatalf("not passed after a full bake: %+v", step)
	}
}

// A bake counts only time the region's agent watched: it ends only on a
// heartbeat sent after its end (the status of every Pod change comes
// before it), starts again when the agent's stream reconnected since it
// began (a ctrld restart, say), and is never shorter than the time an
// agent may be silent and still count as connected.
func TestABakeCountsOnlyWatchedTime(t *testing.T) {
	t.Run("reports from before its end pass nothing", func(t *testing.T) {
		// A frozen agent (SIGSTOP) keeps its connection and sends nothing;
		// ctrld back from a crash reads the reports from before it.
		r := canary(20, 600, 0, "eu")
		step, _ := rollout.Decide(r, heard(healthy(1), start.Add(time.Second)), start.Add(time.Second))
		apply(r, step)
		silent := healthy(1)
		silent.Heard = start.Add(5 * time.Second)
		for _, at := range []time.Duration{22 * time.Second, 60 * time.Second, 500 * time.Second} {
			if step, _ := rollout.Decide(r, map[string]rollout.Region{"eu": silent}, start.Add(at)); step.Advance {
				t.Fatalf("passed at +%s on a heartbeat from +5s: %+v", at, step)
			}
		}
		if step, _ := rollout.Decide(r, heard(healthy(1), start.Add(21*time.Second)), start.Add(21*time.Second)); !step.Advance {
			t.Fatalf("a heartbeat after the bake's end: not passed: %+v", step)
		}
	})
	t.Run("a stream connected since starts it again", func(t *testing.T) {
		r := canary(20, 600, 0, "eu")
		step, _ := rollout.Decide(r, heard(healthy(1), start.Add(time.Second)), start.Add(time.Second))
		apply(r, step)
		back := healthy(1)
		back.ConnectedSince = start.Add(30 * time.Second) // ctrld restarted meanwhile
		step, _ = rollout.Decide(r, heard(back, start.Add(31*time.Second)), start.Add(31*time.Second))
		if step.Advance || !step.Regions["eu"].HealthySince.Equal(start.Add(31*time.Second)) {
			t.Fatalf("a bake across a reconnect: %+v", step.Regions["eu"])
		}
		apply(r, step)
		if step, _ := rollout.Decide(r, heard(back, start.Add(51*time.Second)), start.Add(51*time.Second)); !step.Advance {
			t.Fatalf("20s watched after the reconnect: not passed: %+v", step)
		}
	})
	t.Run("never shorter than an agent's silence", func(t *testing.T) {
		r := canary(0, 600, 0, "eu")
		step, _ := rollout.Decide(r, heard(healthy(1), start.Add(time.Second)), start.Add(time.Second))
		apply(r, step)
		early := start.Add(time.Second + rollout.MinBake - time.Millisecond)
		if step, _ := rollout.Decide(r, heard(healthy(1), early), early); step.Advance {
			t.Fatalf("a bake of 0 passed before %s: %+v", rollout.MinBake, step)
		}
		if step, _ := rollout.Decide(r, heard(healthy(1), early.Add(time.Millisecond)), early.Add(time.Millisecond)); !step.Advance {
			t.Fatalf("not passed after %s: %+v", rollout.MinBake, step)
		}
	})
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
		{"stopped", rollout.Region{Present: true, Stopped: true}, rollout.Waiting, "stopped: nothing runs the new spec: start or scale it, or promote by hand"},
		{"scaled to 0", rollout.Region{Present: true, Connected: true, Applied: 10, Received: 10, InSync: true}, rollout.Waiting, "scaled to 0: nothing runs the new spec"},
		{"gone", rollout.Region{}, rollout.Waiting, "no longer runs here: nothing runs the new spec"},
		{"a restart since the promotion", with(func(r *rollout.Region) { r.Instances[2].Restarts = 1 }), rollout.Failed, "restarted since the region's promotion: api-2 (1)"},
		{"restarts of old pods are not the new spec's", with(func(r *rollout.Region) {
			r.Instances = append(r.Instances, rollout.Instance{Pod: "api-9", SpecHash: "old", Ready: true, Status: "running", Restarts: 4})
		}), rollout.Waiting, "still on another"},
	} {
		verdict, why, _ := rollout.Gate(tc.region, newHash, jsontype.RegionRollout{Version: 10})
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
	step, ok := rollout.Decide(r, heard(crashing, start.Add(time.Second)), start.Add(time.Second))
	if !ok || !step.Halt || !strings.Contains(step.Reason, "eu: 2 of 2 instances CrashLoopBackOff") {
		t.Fatalf("a crash-looping canary: %+v", step)
	}
	r = canary(0, 600, 1, "eu", "us")
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": crashing, "us": healthy(1)}, start.Add(time.Second))
	apply(r, step)
	baked := start.Add(time.Second + rollout.MinBake)
	us := healthy(1)
	us.Heard = baked
	step, _ = rollout.Decide(r, map[string]rollout.Region{"eu": crashing, "us": us}, baked)
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

// Restarts count from the region's promotion, pod by pod: a restart
// while baking fails the region even when the pod is ready again and
// another pod was replaced meanwhile (their sum unchanged), and so does
// one before the region turned healthy. Restarts a pod had when its
// region was given another chance (its baseline) do not count.
func TestARestartSinceThePromotionFails(t *testing.T) {
	r := canary(60, 600, 0, "eu")
	step, _ := rollout.Decide(r, heard(healthy(2), start.Add(time.Second)), start.Add(time.Second))
	apply(r, step)
	bad := healthy(2)
	bad.Instances[0].Restarts = 1                                                                        // died once, ready again
	bad.Instances[1] = rollout.Instance{Pod: "api-1", SpecHash: newHash, Ready: true, Status: "running"} // replaced: had 1, now 0
	step, _ = rollout.Decide(r, heard(bad, start.Add(20*time.Second)), start.Add(20*time.Second))
	if !step.Halt || !strings.Contains(step.Reason, "restarted since the region's promotion: api-0 (1)") {
		t.Fatalf("a restart while baking: %+v", step)
	}

	r = canary(60, 600, 0, "eu")
	early := healthy(2)
	early.Instances[1].Ready, early.Instances[1].Restarts = false, 1
	if step, _ := rollout.Decide(r, heard(early, start.Add(time.Second)), start.Add(time.Second)); !step.Halt {
		t.Fatalf("a restart before the region turned healthy: %+v", step)
	}

	r = canary(60, 600, 0, "eu")
	st := r.Regions["eu"]
	st.Baseline = map[string]int{"api-1": 1}
	r.Regions["eu"] = st
	if step, _ := rollout.Decide(r, heard(early, start.Add(time.Second)), start.Add(time.Second)); step.Halt {
		t.Fatalf("a restart from before its baseline: %+v", step)
	}
}

// A region where nothing runs the new spec (stopped, scaled to 0, or the
// deployment removed from it) proves nothing: it holds its wave, and its
// deadline fails it, saying so. Its operator may promote by hand.
func TestNothingRunningHoldsUntilItsDeadline(t *testing.T) {
	for name, region := range map[string]rollout.Region{
		"stopped":     {Present: true, Stopped: true, Connected: true, Applied: 10, Received: 10, InSync: true},
		"scaled to 0": {Present: true, Connected: true, Applied: 10, Received: 10, InSync: true},
		"removed":     {},
	} {
		r := canary(0, 300, 0, "eu")
		for _, at := range []time.Duration{time.Second, 100 * time.Second, 299 * time.Second} {
			step, _ := rollout.Decide(r, heard(region, start.Add(at)), start.Add(at))
			if step.Advance || step.Halt || step.Regions["eu"].State != desired.RegionProgressing {
				t.Fatalf("%s at +%s: %+v", name, at, step)
			}
		}
		step, _ := rollout.Decide(r, heard(region, start.Add(301*time.Second)), start.Add(301*time.Second))
		if !step.Halt || !strings.Contains(step.Reason, "nothing runs the new spec") {
			t.Fatalf("%s after its deadline: %+v", name, step)
		}
	}
}
