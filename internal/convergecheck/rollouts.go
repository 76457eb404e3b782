package convergecheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploysync/deploysync/internal/rolloutcheck"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// RolloutStats counts the rollouts a run saw end, and the verdict's
// findings.
type RolloutStats struct {
	Succeeded, RolledBack int
	// Bad counts the rollouts to BadImage among them.
	Bad int
	// Halted counts those a failed wave halted (rolled back by ctrld, or
	// held and then aborted by the checker), Aborted those an operator
	// aborted.
	Halted, Aborted int
	// Settled counts rollouts the checker had to resume (paused by an
	// operator) or abort (halted) after the round, as an operator would.
	Settled int
	// BadPastFailedWave counts regions that carried a rolled-back
	// rollout's bad image though the rollout never reached them: must be 0.
	BadPastFailedWave int
	// WatchGaps counts the times an image log lost its cluster's watch
	// and listed again (an API server restart past its watch history):
	// what happened meanwhile may be missing from the verdict.
	WatchGaps int
}

// settleRollouts ends every rollout in flight after a round's operations:
// a paused one is resumed, a halted one aborted (an operator's decisions),
// and then each must end by itself within the bound, promoted or rolled
// back. It returns the problems of those that did not.
func (s *System) settleRollouts(ctx context.Context, within time.Duration, stats *RolloutStats) []string {
	deadline := time.Now().Add(within)
	acted := map[string]bool{}
	for {
		resp, err := s.control.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 500})
		if err != nil {
			if time.Now().After(deadline) {
				return []string{"cannot list the rollouts in flight: " + err.Error()}
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		flying := resp.GetRollouts()
		if len(flying) == 0 {
			return nil
		}
		for _, r := range flying {
			key := fmt.Sprintf("%s@%d", r.DeploymentId, r.Revision)
			var action ctrlv1.RolloutAction
			switch r.State {
			case "paused":
				action = ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME
			case "halted":
				action = ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT
			default:
				continue
			}
			if _, err := s.control.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: r.DeploymentId, Action: action}); err == nil && !acted[key] {
				acted[key] = true
				stats.Settled++
			}
		}
		if time.Now().After(deadline) {
			var problems []string
			for _, r := range flying {
				problems = append(problems, fmt.Sprintf("rollout of %s to revision %d still %s at wave %d after %s (%s)",
					r.DeploymentId, r.Revision, r.State, r.Wave, within, r.Reason))
			}
			return problems
		}
		select {
		case <-ctx.Done():
			return []string{ctx.Err().Error()}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// badPastFailedWave checks a rollout to BadImage against what the API
// servers' watches saw, not ctrld's account of it: a region whose
// StatefulSet ran BadImage with replicas (kwok crash-loops every such
// Pod) fails its wave, so while it keeps running it no region of a later
// wave may receive the image. Regions the rollout left waiting never
// may. A rollout an operator promoted by hand overrode its gate, and is
// not held to the first rule.
func (s *System) badPastFailedWave(r *ctrlv1.Rollout) []string {
	from, to := r.CreatedAt.AsTime(), r.FinishedAt.AsTime()
	waveOf := map[string]int32{}
	promotedByHand := false
	for _, region := range r.Regions {
		waveOf[region.Region] = region.Wave
		promotedByHand = promotedByHand || strings.HasPrefix(region.Why, "promoted by")
	}
	within := func(history []rolloutcheck.Sighting) []rolloutcheck.Sighting {
		var out []rolloutcheck.Sighting
		for _, h := range history {
			if !h.At.Before(from) && !h.At.After(to) {
				out = append(out, h)
			}
		}
		return out
	}
	var violations []string
	for _, b := range r.Regions {
		got := within(s.regions[b.Region].images.History(r.DeploymentId))
		first := slices.IndexFunc(got, func(h rolloutcheck.Sighting) bool { return !h.Deleted && h.Image == BadImage })
		if first < 0 {
			continue
		}
		tb := got[first].At
		if b.State == "waiting" {
			violations = append(violations, fmt.Sprintf("rollout of %s to revision %d (%s) never reached %s, yet its StatefulSet carried %s at %s",
				r.DeploymentId, r.Revision, r.Reason, b.Region, BadImage, tb.Format(time.StampMilli)))
			continue
		}
		if promotedByHand {
			continue
		}
		for _, a := range r.Regions {
			if waveOf[a.Region] >= waveOf[b.Region] {
				continue
			}
			if ta, ok := crashLoopingSince(within(s.regions[a.Region].images.History(r.DeploymentId)), tb); ok {
				violations = append(violations, fmt.Sprintf("rollout of %s to revision %d (%s): %s (wave %d) got %s at %s, while %s (wave %d) had run it with replicas, crash-looping, since %s",
					r.DeploymentId, r.Revision, r.Reason, b.Region, waveOf[b.Region], BadImage, tb.Format(time.StampMilli),
					a.Region, waveOf[a.Region], ta.Format(time.StampMilli)))
			}
		}
	}
	return violations
}

// crashLoopingSince tells whether history shows the StatefulSet running
// BadImage with replicas continuously from some time before until: every
// sighting from then on BadImage, with replicas, not deleted.
func crashLoopingSince(history []rolloutcheck.Sighting, until time.Time) (time.Time, bool) {
	var since time.Time
	for _, h := range history {
		if h.At.After(until) {
			break
		}
		if h.Deleted || h.Image != BadImage || h.Replicas == 0 {
			since = time.Time{}
		} else if since.IsZero() {
			since = h.At
		}
	}
	return since, !since.IsZero()
}

// rolloutVerdict checks every rollout that ended since the last verdict:
// a rolled-back rollout's bad image was never carried by a StatefulSet in
// a region it did not reach, as the API servers' own watch saw them. It
// counts the rollouts by outcome and returns the violations.
func (s *System) rolloutVerdict(ctx context.Context, judged map[string]bool, stats *RolloutStats) ([]string, error) {
	resp, err := s.control.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: 500})
	if err != nil {
		return nil, fmt.Errorf("list the rollouts: %w", err)
	}
	var violations []string
	for _, r := range resp.GetRollouts() {
		// A deployment deleted and deployed again numbers its revisions
		// from 1 again.
		key := fmt.Sprintf("%s@%d@%d", r.DeploymentId, r.Revision, r.CreatedAt.AsTime().UnixNano())
		if judged[key] || r.FinishedAt == nil {
			continue
		}
		judged[key] = true
		switch r.State {
		case "succeeded":
			stats.Succeeded++
		case "rolled_back":
			stats.RolledBack++
			if strings.HasPrefix(r.Reason, "aborted by") {
				stats.Aborted++
			} else {
				stats.Halted++
			}
		}
		if r.ToImage != BadImage || r.FromImage == BadImage {
			continue
		}
		stats.Bad++
		for _, v := range s.badPastFailedWave(r) {
			stats.BadPastFailedWave++
			violations = append(violations, v)
		}
	}
	stats.WatchGaps = 0
	for _, name := range Regions {
		stats.WatchGaps += len(s.regions[name].images.Gaps())
	}
	return violations, nil
}
