package convergecheck

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/internal/rolloutcheck"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// No wave passes on an inconclusive check: a later region given the new
// spec while the earlier region's Prometheus had been down since before
// the newest evaluation the gate could have read was answered is a
// violation; one whose Prometheus may have answered it (it came back, or
// went down too late to tell, or the agent's calls failed meanwhile so
// the newest result is older) is not. A wave passed with no stored
// evaluation at all is one too.
func TestNoWavePassesOnAnInconclusiveCheck(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const ms = time.Millisecond
	r := &ctrlv1.Rollout{Id: 7, DeploymentId: "api", Revision: 3, State: "succeeded"}
	id := assignmentID(r, errorRateCheck)
	eu := &ctrlv1.RolloutRegion{Region: "eu", Wave: 1, State: "passed", PromotedAt: timestamppb.New(at(10 * time.Second))}
	us := &ctrlv1.RolloutRegion{Region: "us", Wave: 2, State: "passed", PromotedAt: timestamppb.New(at(20 * time.Second))}
	p := pass{later: us, earlier: eu, carried: at(20300 * ms)}
	call := func(from time.Duration, result, assigned bool) syncCall {
		c := syncCall{start: at(from), end: at(from + 50*ms), results: map[string]bool{}, assigned: map[string]bool{}}
		if result {
			c.results[id] = true
		}
		if assigned {
			c.assigned[id] = true
		}
		return c
	}
	// eu's agent's calls every 2 s from its promotion, each with a result
	// of the check from the second on: the newest one the look at 20 s
	// read came with the call of 18.1 s, answered after the call of
	// 16.1 s began.
	cadence := []syncCall{call(10100*ms, false, true)}
	for from := 12100 * ms; from < 20*time.Second; from += 2 * time.Second {
		cadence = append(cadence, call(from, true, true))
	}
	// A database outage: the calls of 14.1 s and 16.1 s failed, so the
	// call of 18.1 s carried the result of the evaluation the call of
	// 12.1 s started.
	gap := []syncCall{call(10100*ms, false, true), call(12100*ms, true, true), call(18100*ms, true, true)}
	down := func(from, to time.Duration) []promOutage {
		o := promOutage{down: at(from)}
		if to > 0 {
			o.up = at(to)
		}
		return []promOutage{o}
	}
	cases := []struct {
		name    string
		calls   []syncCall
		outages []promOutage
		want    string // in the violation; "" for none
		judged  bool
	}{
		{name: "Prometheus up throughout", calls: cadence, judged: true},
		{name: "down since before the call before the newest result's", calls: cadence, outages: down(15*time.Second, 0), judged: true,
			want: "eu's Prometheus was down from Jan  1 12:00:15.000 (still down): the newest result of the check the gate could have read came with the SyncChecks call of Jan  1 12:00:18.100"},
		{name: "down until after the StatefulSet turned", calls: cadence, outages: down(15*time.Second, 21*time.Second), judged: true,
			want: "(started again at Jan  1 12:00:21.000)"},
		{name: "down too late to tell", calls: cadence, outages: down(15500*ms, 0), judged: true},
		{name: "started again before the look", calls: cadence, outages: down(12*time.Second, 19*time.Second), judged: true},
		{name: "calls failed: the newest result is older", calls: gap, outages: down(15*time.Second, 0), judged: true},
		{name: "calls failed, and down since before", calls: gap, outages: down(11*time.Second, 0), judged: true,
			want: "came with the SyncChecks call of Jan  1 12:00:18.100"},
		{name: "no result stored", calls: []syncCall{call(12100*ms, false, true), call(14100*ms, true, false)}, judged: true,
			want: errNoEvaluation.Error()},
		{name: "the only result came as the look was made", calls: []syncCall{call(12100*ms, false, true), call(19900*ms, true, true)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, found := noVerdictPass(r, p, errorRateCheck, checkLog{calls: c.calls, outages: c.outages})
			switch {
			case c.want == "" && v != "":
				t.Fatalf("violation %q, want none", v)
			case c.want != "" && !strings.Contains(v, c.want):
				t.Fatalf("violation %q, want one saying %q", v, c.want)
			}
			if found.judged != c.judged {
				t.Errorf("judged %v, want %v", found.judged, c.judged)
			}
			if found.afterOutage != (len(c.outages) > 0) {
				t.Errorf("after an outage: %v, want %v", found.afterOutage, len(c.outages) > 0)
			}
			t.Log(v)
		})
	}
}

// Only a rollout that cannot pass its first wave counts as a bad revision
// past it: a crashing image whatever its checks, ErrorsImage only under
// the error-rate check (without one nothing can tell it from a good one).
func TestWhatMustFailItsFirstWave(t *testing.T) {
	withCheck := &ctrlv1.Rollout{Strategy: &ctrlv1.RolloutStrategy{Checks: errorRateChecks()}}
	without := &ctrlv1.Rollout{Strategy: &ctrlv1.RolloutStrategy{}}
	for _, c := range []struct {
		r     *ctrlv1.Rollout
		image string
		want  bool
	}{
		{withCheck, ErrorsImage, true}, {without, ErrorsImage, false}, {without, BadImage, true},
		{withCheck, CrashOnceImage, true}, {withCheck, images[0], false},
	} {
		if got := mustFail(c.r, c.image); got != c.want {
			t.Errorf("%s, checks %d: must fail %v, want %v", c.image, len(c.r.Strategy.Checks), got, c.want)
		}
	}
}

// ErrorsImage under the error-rate check never reaches the second wave,
// even after a canary that ran it ready for its bake (its Pods are Ready:
// only the check tells), unless an operator promoted the canary's wave by
// hand; without the check nothing holds it back.
func TestAnImageThatServesErrorsStaysInItsFirstWave(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	env := map[string]string{"REV": "7"}
	sts := func(d time.Duration, image string, ready int32) rolloutcheck.Sighting {
		return rolloutcheck.Sighting{Namespace: "acme-prod", Name: "api", Image: image, Env: env, Replicas: 1,
			Generation: 2, ObservedGeneration: 2, StatusReplicas: 1, ReadyReplicas: ready, UpdatedReplicas: 1, At: at(d)}
	}
	logs := map[string]clusterLog{
		"eu": &fakeLog{sets: []rolloutcheck.Sighting{sts(100*time.Millisecond, ErrorsImage, 0), sts(500*time.Millisecond, ErrorsImage, 1)}},
		"us": &fakeLog{sets: []rolloutcheck.Sighting{sts(8*time.Second, ErrorsImage, 0)}},
	}
	rollout := func(why string, checks []*ctrlv1.RolloutCheck) *ctrlv1.Rollout {
		return &ctrlv1.Rollout{Id: 7, DeploymentId: "api", Revision: 3, State: "succeeded", ToImage: ErrorsImage, FromImage: "app:v1",
			CreatedAt: timestamppb.New(t0), FinishedAt: timestamppb.New(at(20 * time.Second)),
			Strategy: &ctrlv1.RolloutStrategy{Checks: checks, Waves: []*ctrlv1.RolloutWave{
				{Regions: []string{"eu"}, Bake: durationpb.New(time.Second)}, {Regions: []string{"us"}, Bake: durationpb.New(time.Second)}}},
			Regions: []*ctrlv1.RolloutRegion{
				{Region: "eu", Wave: 1, State: "passed", Why: why, PromotedAt: timestamppb.New(t0)},
				{Region: "us", Wave: 2, State: "passed", PromotedAt: timestamppb.New(at(7900 * time.Millisecond))}}}
	}
	spec := newSpec{image: ErrorsImage, env: env}
	if v, _, bad := brokenPromise(rollout("", errorRateChecks()), spec, logs); bad != 1 || len(v) != 1 || !strings.Contains(v[0], "us (wave 2) carried "+ErrorsImage+", which must fail its first wave") {
		t.Errorf("under the check: %d bad past, violations %q; want us named", bad, v)
	}
	if v, _, bad := brokenPromise(rollout("promoted by dana", errorRateChecks()), spec, logs); bad != 0 || len(v) != 0 {
		t.Errorf("promoted by hand: %d bad past, violations %q; want none", bad, v)
	}
	if v, passes, bad := brokenPromise(rollout("", nil), spec, logs); bad != 0 || len(v) != 0 || len(passes) != 1 {
		t.Errorf("without the check: %d bad past, violations %q, %d passes; want one pass and nothing else", bad, v, len(passes))
	}
}
