package rollout_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/gatecheck"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/ent/jsontype"
)

var errorRate = jsontype.Check{Name: "error-rate", Kind: gatecheck.Metric, Bound: "< 0.01", IntervalSeconds: 2, MinSamples: 3}

// evaluated is region with one evaluation of error-rate every 2s from
// start+from to start+to, each verdict from judge.
func evaluated(region rollout.Region, from, to time.Duration, judge func(time.Duration) rollout.Evaluation) rollout.Region {
	region.Checks = map[string][]rollout.Evaluation{}
	for d := from; d <= to; d += 2 * time.Second {
		e := judge(d)
		e.At = start.Add(d)
		region.Checks["error-rate"] = append(region.Checks["error-rate"], e)
	}
	return region
}

func passing(time.Duration) rollout.Evaluation {
	return rollout.Evaluation{Verdict: gatecheck.Pass, HasValue: true, Value: 0.001, Bound: "< 0.01"}
}

// A region whose pods are ready passes only once its checks have a
// verdict: enough samples in the bake, the newest after its end.
func TestAHealthyRegionPassesOnlyWithItsChecksPassing(t *testing.T) {
	r := canary(10, 60, 0, "eu")
	r.FromSpec.Hash = "old"
	r.Strategy.Checks = []jsontype.Check{errorRate}
	look := func(at time.Duration, region rollout.Region) {
		t.Helper()
		if step, ok := rollout.Decide(r, heard(region, start.Add(at)), start.Add(at)); ok {
			apply(r, step)
		}
	}
	look(time.Second, healthy(3))
	// The bake is over and the agent heard, but no evaluation came in.
	look(12*time.Second, healthy(3))
	if st := r.Regions["eu"]; st.State != desired.RegionBaking || !strings.Contains(st.Why, "no evaluation") {
		t.Fatalf("baked without evaluations: %+v, want baking, waiting for a verdict", st)
	}
	// Two samples in the bake: too few.
	look(13*time.Second, evaluated(healthy(3), 10*time.Second, 12*time.Second, passing))
	if st := r.Regions["eu"]; st.State != desired.RegionBaking || !strings.Contains(st.Why, "2 of 3 samples") {
		t.Fatalf("2 samples: %+v", st)
	}
	look(15*time.Second, evaluated(healthy(3), 10*time.Second, 14*time.Second, passing))
	if st := r.Regions["eu"]; st.State != desired.RegionPassed {
		t.Fatalf("3 passing samples after the bake: %+v, want passed", st)
	}
}

// A failing evaluation fails the region at once, with the numbers, even
// while its pods are still starting.
func TestAFailingCheckFailsTheRegionWithItsNumbers(t *testing.T) {
	r := canary(60, 600, 0, "eu")
	r.Strategy.Checks = []jsontype.Check{errorRate}
	starting := healthy(3)
	starting.Instances[2].Ready = false
	failing := evaluated(starting, 2*time.Second, 6*time.Second, func(d time.Duration) rollout.Evaluation {
		if d < 6*time.Second {
			return passing(d)
		}
		return rollout.Evaluation{Verdict: gatecheck.Fail, HasValue: true, Value: 0.2, Why: "0.2 >= 0.01", Bound: "< 0.01"}
	})
	step, ok := rollout.Decide(r, heard(failing, start.Add(7*time.Second)), start.Add(7*time.Second))
	if !ok || !step.Halt {
		t.Fatalf("a failing evaluation: %+v, want the wave halted", step)
	}
	want := "eu: check error-rate: 0.2 >= 0.01, 1 failing evaluation(s), 0 allowed"
	if !strings.Contains(step.Reason, want) {
		t.Fatalf("reason %q, want it to say %q", step.Reason, want)
	}
	// With a failure allowed, the same evaluation does not fail it.
	r = canary(60, 600, 0, "eu")
	lenient := errorRate
	lenient.FailureLimit = 1
	r.Strategy.Checks = []jsontype.Check{lenient}
	if step, _ := rollout.Decide(r, heard(failing, start.Add(7*time.Second)), start.Add(7*time.Second)); step.Halt {
		t.Fatalf("one failing evaluation of one allowed: %+v", step)
	}
}

// No data, or a Prometheus that stopped answering, never passes: the
// region holds past its bake until its deadline (from the promotion, with
// the bake) fails it, saying which check had no verdict and why.
func TestAnInconclusiveCheckHoldsUntilTheDeadline(t *testing.T) {
	r := canary(10, 30, 0, "eu")
	r.Strategy.Checks = []jsontype.Check{errorRate}
	outage := func(d time.Duration) rollout.Evaluation {
		if d < 8*time.Second {
			return passing(d)
		}
		return rollout.Evaluation{Verdict: gatecheck.None, Why: `Get "http://127.0.0.1:9090/api/v1/query": connection refused`}
	}
	look := func(at time.Duration) *desired.RolloutStep {
		step, ok := rollout.Decide(r, heard(evaluated(healthy(3), 2*time.Second, at, outage), start.Add(at)), start.Add(at))
		if ok {
			apply(r, step)
			return &step
		}
		return nil
	}
	look(time.Second)
	for _, at := range []time.Duration{12 * time.Second, 20 * time.Second, 40 * time.Second} {
		look(at)
		if st := r.Regions["eu"]; st.State != desired.RegionBaking || !strings.Contains(st.Why, "connection refused") {
			t.Fatalf("at %s, Prometheus down since 8s: %+v, want baking, no verdict", at, st)
		}
	}
	step := look(41 * time.Second)
	if step == nil || !step.Halt || !strings.Contains(step.Reason, "check error-rate had no verdict within its deadline of 30s after the bake") {
		t.Fatalf("past the deadline and the bake: %+v, want a halt naming the check", step)
	}
}

// A baseline check of a deployment's first rollout has nothing to
// compare with: it does not hold the wave.
func TestABaselineCheckOfAFirstRolloutDoesNotHold(t *testing.T) {
	r := canary(10, 60, 0, "eu")
	r.Strategy.Checks = []jsontype.Check{{Name: "vs-old", Kind: gatecheck.Baseline, IntervalSeconds: 2, MinSamples: 3}}
	rollout.Decide(r, heard(healthy(3), start.Add(time.Second)), start.Add(time.Second))
	step, _ := rollout.Decide(r, heard(healthy(3), start.Add(time.Second)), start.Add(time.Second))
	apply(r, step)
	if step, _ := rollout.Decide(r, heard(healthy(3), start.Add(12*time.Second)), start.Add(12*time.Second)); !step.Advance {
		t.Fatalf("a first rollout's baseline check: %+v, want the wave passed", step)
	}
}

// A region that fails on a crash quotes what the crashed container said,
// on one line, bounded: the halt's reason carries it.
func TestAFailedGateQuotesTheCrashedContainer(t *testing.T) {
	r := canary(60, 600, 0, "eu")
	crashed := healthy(3)
	crashed.Instances[1].Ready, crashed.Instances[1].Reason, crashed.Instances[1].Restarts = false, "CrashLoopBackOff", 4
	crashed.Instances[1].Evidence = "starting\npanic: DATABASE_URL is not set\n\ngoroutine 1 [running]:"
	step, ok := rollout.Decide(r, heard(crashed, start.Add(time.Second)), start.Add(time.Second))
	want := `eu: 1 of 3 instances CrashLoopBackOff (restarts 4): "starting panic: DATABASE_URL is not set goroutine 1 [running]:"`
	if !ok || !step.Halt || !strings.Contains(step.Reason, want) {
		t.Fatalf("reason %q, want it to quote the container: %q", step.Reason, want)
	}
	crashed.Instances[1].Evidence = strings.Repeat("x", 10000)
	step, _ = rollout.Decide(canary(60, 600, 0, "eu"), heard(crashed, start.Add(time.Second)), start.Add(time.Second))
	if len(step.Reason) > 400 || !strings.HasSuffix(step.Reason, `…"`) {
		t.Fatalf("a 10,000-byte evidence makes a reason of %d bytes: %.80q…", len(step.Reason), step.Reason)
	}
}
