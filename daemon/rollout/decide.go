package rollout

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
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
			next := judge(st, regions[name], r.ToSpec.Hash, bake, deadline, now)
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

// judge is a region's next state in the wave after one look.
func judge(st jsontype.RegionRollout, r Region, hash string, bake, deadline time.Duration, now time.Time) jsontype.RegionRollout {
	verdict, why, restarts := Gate(r, hash, st.Version)
	next := st
	next.Why = why
	switch verdict {
	case Failed:
		next.State = desired.RegionFailed
		return next
	case Healthy:
		if st.HealthySince == nil {
			since := now
			next.HealthySince, next.Restarts = &since, restarts
		} else if restarts > st.Restarts {
			next.State = desired.RegionFailed
			next.Why = fmt.Sprintf("instances restarted while baking (restarts %d -> %d)", st.Restarts, restarts)
			return next
		}
		next.State = desired.RegionBaking
		if baked := now.Sub(*next.HealthySince); baked >= bake {
			next.State = desired.RegionPassed
		}
		return next
	}
	next.HealthySince, next.Restarts = nil, 0
	next.State = desired.RegionProgressing
	if st.PromotedAt != nil && now.Sub(*st.PromotedAt) > deadline {
		next.State = desired.RegionFailed
		next.Why = fmt.Sprintf("not healthy within its deadline of %s: %s", deadline, why)
	}
	return next
}

// sameState reports whether a region's state is unchanged, so that a look
// that finds nothing new writes nothing.
func sameState(a, b jsontype.RegionRollout) bool {
	return a.State == b.State && a.Why == b.Why && a.Restarts == b.Restarts && a.Version == b.Version &&
		sameTime(a.HealthySince, b.HealthySince) && sameTime(a.PromotedAt, b.PromotedAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
