package rollout

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// Decide is the next step of a progressing rollout, given what its
// regions look like at now: each region of the current wave judged by its
// gate (Gate), then the wave passed (every region passed, or failed within
// max_failures), failed (more failures than that: a halt, with the
// evidence), or still going. ok is false when nothing changed, so nothing
// is written.
func Decide(r *ent.Rollout, regions map[string]Region, now time.Time) (step desired.RolloutStep, ok bool) {
	wave := r.Strategy.Waves[r.Wave]
	states := maps.Clone(r.Regions)
	if states == nil {
		states = map[string]jsontype.RegionRollout{}
	}
	bake := time.Duration(wave.BakeSeconds) * time.Second
	deadline := time.Duration(wave.DeadlineSeconds) * time.Second
	changed := false
	failed, settled := 0, 0
	var evidence []string
	for _, name := range wave.Regions {
		st := states[name]
		if st.State != desired.RegionPassed && st.State != desired.RegionFailed {
			next := judge(st, regions[name], r.ToSpec.Hash, gates{bake: bake, deadline: deadline, checks: r.Strategy.Checks, first: r.FromSpec.Hash == ""}, now)
			if !sameState(st, next) {
				states[name], changed = next, true
			}
			st = next
		}
		switch st.State {
		case desired.RegionPassed:
			settled++
		case desired.RegionFailed:
			settled++
			failed++
			evidence = append(evidence, name+": "+st.Why)
		}
	}
	step = desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: states}
	switch {
	case failed > wave.MaxFailures:
		step.Halt = true
		step.Reason = fmt.Sprintf("wave %d of %d failed (%d of %d regions, %d allowed): %s",
			r.Wave+1, len(r.Strategy.Waves), failed, len(wave.Regions), wave.MaxFailures, strings.Join(evidence, "; "))
	case settled == len(wave.Regions):
		step.Advance = true
	case !changed:
		return step, false
	}
	return step, true
}

// MinBake is the shortest bake: what a region's agent reported may be
// this old (regionhealth.AgentSilence), so a shorter one could pass on
// time nobody saw.
const MinBake = regionhealth.AgentSilence

// awaitingVerdict begins the why of a region whose bake is over but a
// check of which has no verdict.
const awaitingVerdict = "baked; check "

// gates are what a region of a wave is held to: its bake and deadline,
// and the rollout's checks (first: a first rollout, with no previous
// revision for baseline checks).
type gates struct {
	bake, deadline time.Duration
	checks         []jsontype.Check
	first          bool
}

// judge is a region's next state in the wave after one look at now (the
// database's clock).
//
// A bake counts only time the region's agent watched: it starts at a
// healthy look, starts again at every look that is not (an agent silent
// for AgentSilence is not connected, so not healthy) and when the agent's
// stream connected since it started, and it ends only once a heartbeat
// sent after its end came in (a heartbeat follows the status of every
// Pod change the agent saw before it). A ctrld that comes back after a
// crash therefore never passes a bake on reports from before it.
//
// The rollout's checks must pass too (JudgeChecks): a check that fails
// fails the region at once, healthy or not; one without a verdict holds
// the region past its bake until its deadline, counted from the
// promotion, with the bake added, fails it.
func judge(st jsontype.RegionRollout, r Region, hash string, g gates, now time.Time) jsontype.RegionRollout {
	verdict, why, restarts := Gate(r, hash, st)
	next := st
	next.Why, next.Restarts = why, restarts
	if verdict == Healthy && (st.HealthySince == nil || r.ConnectedSince.After(*st.HealthySince)) {
		since := now
		next.HealthySince = &since
	}
	if verdict != Healthy {
		next.HealthySince = nil
	}
	bakeEnd := time.Time{}
	if next.HealthySince != nil {
		bakeEnd = next.HealthySince.Add(max(g.bake, MinBake))
	}
	checks := JudgeChecks(g.checks, g.first, r.Checks, next, bakeEnd)
	for _, c := range checks {
		if c.Verdict == CheckFailed && verdict != Failed {
			verdict, next.Why = Failed, "check "+c.Why
		}
	}
	switch verdict {
	case Failed:
		next.State = desired.RegionFailed
		return next
	case Healthy:
		next.State = desired.RegionBaking
		if r.Heard.Before(bakeEnd) {
			return next
		}
		for _, c := range checks {
			if c.Verdict != Passing {
				next.Why = fmt.Sprintf("%s%s has no verdict: %s", awaitingVerdict, c.Name, c.Why)
				if st.PromotedAt != nil && now.Sub(*st.PromotedAt) > g.deadline+max(g.bake, MinBake) {
					next.State = desired.RegionFailed
					next.Why = fmt.Sprintf("check %s had no verdict within its deadline of %s after the bake: %s", c.Name, g.deadline, c.Why)
				}
				return next
			}
		}
		next.State = desired.RegionPassed
		return next
	}
	next.State = desired.RegionProgressing
	if st.PromotedAt != nil && now.Sub(*st.PromotedAt) > g.deadline {
		next.State = desired.RegionFailed
		next.Why = fmt.Sprintf("not healthy within its deadline of %s: %s", g.deadline, why)
	}
	return next
}

// sameState reports whether a region's state is unchanged, so that a look
// that finds nothing new writes nothing.
func sameState(a, b jsontype.RegionRollout) bool {
	return a.State == b.State && a.Why == b.Why && a.Restarts == b.Restarts && a.Version == b.Version && maps.Equal(a.Baseline, b.Baseline) &&
		sameTime(a.HealthySince, b.HealthySince) && sameTime(a.PromotedAt, b.PromotedAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
