package convergecheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	entrollout "github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/rolloutcheck"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// RolloutStats counts the rollouts a run saw end, and the verdict's
// findings.
type RolloutStats struct {
	Succeeded, RolledBack int
	// Bad counts the rollouts to a failing image among them (BadImage,
	// CrashOnceImage, CrashLaterImage).
	Bad int
	// Halted counts those a failed wave halted (rolled back by ctrld, or
	// held and then aborted by the checker), Aborted those an operator
	// aborted.
	Halted, Aborted int
	// Settled counts rollouts the checker had to resume (paused by an
	// operator) or abort (halted) after the round, as an operator would.
	Settled int
	// Judged counts the rollouts the verdict held to the promise, and
	// Passes the times one of them gave a later wave the new spec after
	// an earlier wave ran it (each later region against each earlier
	// one); Unjudged those whose new spec it could not read (the rollout
	// pruned first), so it could not tell it from the one before.
	Judged, Passes, Unjudged int
	// Broken counts the regions the verdict found given a rollout's new
	// spec against its promise: must be 0.
	Broken int
	// Tightest is the least margin by which an earlier wave's ready run
	// covered its bake before a later wave got the spec, over the Passes
	// the verdict accepted without a promotion by hand: the room the
	// verdict leaves for the API servers' watch latency (none).
	Tightest time.Duration
	// Plans counts the rollouts whose plan the verdict read (in flight or
	// ended): each starts with its strategy's named first wave, never
	// with its "*" wave (starDeadline's), which would mean the named wave
	// was dropped: every strategy of the checker names its first wave,
	// and a wave naming none of a deployment's regions refuses the call.
	Plans int
	// Checked counts the rollouts whose strategy carried the error-rate
	// check, Errors those of them to ErrorsImage; OnMetrics those a check
	// halted (a region failed on it: failing, or NoVerdict of them
	// without a verdict within its deadline).
	Checked, Errors, OnMetrics, NoVerdict int
	// BadPast counts the regions past a rollout's first wave that carried
	// a new spec that must fail there (a crashing image, ErrorsImage under
	// the check) with no wave before promoted by hand: must be 0.
	BadPast int
	// CheckPasses counts the Passes of checked rollouts the checks verdict
	// held to "no wave passes on an inconclusive check" (noVerdictPass),
	// CheckUnjudged those it could not tell (a call ending just at the
	// look); AfterOutage of them those whose earlier region's Prometheus
	// was down at some time between its promotion and the pass, and
	// SoonestAfterOutage the least time from it starting again to the
	// pass.
	CheckPasses, CheckUnjudged, AfterOutage int
	SoonestAfterOutage                      time.Duration
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

// newSpec is what a rollout moves regions to, as a cluster shows it: the
// image and the container's environment (the checker's updates set a
// fresh REV each, so the environment tells one rollout of an image from
// the next).
type newSpec struct {
	image string
	env   map[string]string
	// imageOnly: the environment is not known, only the image counts.
	imageOnly bool
}

func (n newSpec) in(image string, env map[string]string) bool {
	return image == n.image && (n.imageOnly || maps.Equal(env, n.env))
}

// specOf reads a rollout's new spec from its row. ok is false when it
// cannot be told from the spec before (the row is gone, and the image is
// the same).
func (s *System) specOf(ctx context.Context, r *ctrlv1.Rollout) (newSpec, bool, error) {
	rows, err := s.env.DB.Ent.Rollout.Query().
		Where(entrollout.DeploymentID(r.DeploymentId), entrollout.Revision(int(r.Revision))).All(ctx)
	if err != nil {
		return newSpec{}, false, fmt.Errorf("read the rollouts of %s: %w", r.DeploymentId, err)
	}
	for _, row := range rows {
		if d := row.CreatedAt.Sub(r.CreatedAt.AsTime()); d > -time.Millisecond && d < time.Millisecond {
			return newSpec{image: row.ToSpec.Image, env: row.ToSpec.Env}, true, nil
		}
	}
	if r.ToImage != r.FromImage {
		return newSpec{image: r.ToImage, imageOnly: true}, true, nil
	}
	return newSpec{}, false, nil
}

// judgeAfter is how long after a rollout ended the verdict waits before
// it judges it during a round: the image logs' watches deliver what the
// API servers saw a moment later.
const judgeAfter = time.Second

// brokenPromise holds one ended rollout to its promise, as the API
// servers' own watches saw it, not ctrld's account of it:
//
//   - a region the rollout never reached never carried its new spec;
//   - a region of a later wave first carried it (the first time one of
//     its StatefulSets turned to it, or when ctrld promoted it, if that
//     was earlier) only after every region of each earlier wave had run
//     it: a StatefulSet on the new spec with replicas, every replica
//     ready and updated as the API server reported its status, for that
//     wave's bake without a break, and no Pod of the new spec restarted
//     since the rollout began, or since an operator last resumed the
//     wave (a resume gives its regions another chance, their restarts
//     counted from it: ctrld's promotion time of the region then). A
//     stopped region (its StatefulSet deleted), one scaled to 0 or one
//     removed ran nothing, so it proved nothing. A wave an operator
//     promoted by hand (its regions' why "promoted by ...") overrode its
//     gate, and proves nothing to check.
//
// A crash-once image passes a resumed wave (its Pods crashed before the
// resume and are ready for good after), so it is no bad revision past
// one.
//
// A rollout whose new image must fail its first wave (mustFail: a
// crashing image, or ErrorsImage under the error-rate check) may not reach
// a region of a later wave at all, unless an operator promoted a wave
// before it by hand: badPast counts those regions.
//
// It returns the violations, and for each later region it judged against
// an earlier one the pass, with the margin by which the earlier one's
// bake was covered.
func brokenPromise(r *ctrlv1.Rollout, spec newSpec, logs map[string]clusterLog) (violations []string, passes []pass, badPast int) {
	from, to := r.CreatedAt.AsTime(), r.FinishedAt.AsTime()
	byHand := map[int32]bool{}
	for _, region := range r.Regions {
		byHand[region.Wave] = byHand[region.Wave] || strings.HasPrefix(region.Why, "promoted by")
	}
	what := fmt.Sprintf("rollout of %s to revision %d (%s", r.DeploymentId, r.Revision, r.State)
	if r.Reason != "" {
		what += ": " + r.Reason
	}
	what += ")"
	for _, b := range r.Regions {
		if logs[b.Region] == nil {
			continue // a region without a cluster here
		}
		tb, ok := firstCarried(logs[b.Region].History(r.DeploymentId), spec, from, to)
		if !ok {
			continue
		}
		if b.State == "waiting" {
			violations = append(violations, fmt.Sprintf("%s never reached %s, yet its StatefulSet carried the new spec (%s) at %s",
				what, b.Region, spec.image, stamp(tb)))
			continue
		}
		cut := tb
		if b.PromotedAt != nil && b.PromotedAt.AsTime().Before(cut) {
			cut = b.PromotedAt.AsTime()
		}
		// A crash-once image's Pods crash once, and are ready for good
		// after: an operator's resume of the wave after the crash gives
		// it another chance, which it passes.
		first := r.Regions[0].Wave
		if b.Wave > first && mustFail(r, spec.image) && !slices.ContainsFunc(r.Regions, func(a *ctrlv1.RolloutRegion) bool {
			return a.Wave < b.Wave && (byHand[a.Wave] || spec.image == CrashOnceImage && resumed(r, a))
		}) {
			badPast++
			violations = append(violations, fmt.Sprintf("%s: %s (wave %d) carried %s, which must fail its first wave, from %s (no wave before it promoted by hand)",
				what, b.Region, b.Wave, spec.image, stamp(tb)))
		}
		for _, a := range r.Regions {
			if a.Wave >= b.Wave || byHand[a.Wave] || logs[a.Region] == nil {
				continue
			}
			bake := time.Duration(0)
			if w := r.Strategy.GetWaves(); int(a.Wave) <= len(w) {
				bake = w[a.Wave-1].GetBake().AsDuration()
			}
			// Restarts count from the region's promotion, which an
			// operator's resume of its wave moves to the resume: another
			// chance, restarts counted from then (daemon/desired's resume).
			restartsFrom := from
			if a.PromotedAt != nil && a.PromotedAt.AsTime().After(from) {
				restartsFrom = a.PromotedAt.AsTime()
			}
			p := ranIt(logs[a.Region].History(r.DeploymentId), logs[a.Region].Pods(r.DeploymentId), spec, from, restartsFrom, cut)
			promoted := "no promotion recorded"
			if b.PromotedAt != nil {
				promoted = "promoted " + stamp(b.PromotedAt.AsTime())
			}
			got := fmt.Sprintf("%s: %s (wave %d) got the new spec (%s) at %s (%s), though %s (wave %d)",
				what, b.Region, b.Wave, spec.image, stamp(tb), promoted, a.Region, a.Wave)
			switch {
			case p.restart != "":
				violations = append(violations, fmt.Sprintf("%s had a Pod of it restart before: %s", got, p.restart))
			case p.ready < bake || p.readyFrom.IsZero():
				run := "it was never ready"
				if !p.readyFrom.IsZero() {
					run = fmt.Sprintf("its longest ready run was %s, from %s", p.ready.Round(time.Millisecond), stamp(p.readyFrom))
				}
				violations = append(violations, fmt.Sprintf("%s had not run it ready for its bake of %s before: %s; its StatefulSet then: %s",
					got, bake, run, p.last))
			default:
				passes = append(passes, pass{later: b, earlier: a, carried: tb, margin: p.ready - bake})
			}
		}
	}
	return violations, passes, badPast
}

// resumed tells whether a region of a rollout's first wave was promoted
// again after the rollout began: its wave resumed by an operator (the
// first wave is promoted as the rollout is created).
func resumed(r *ctrlv1.Rollout, a *ctrlv1.RolloutRegion) bool {
	return a.Wave == r.Regions[0].Wave && a.PromotedAt != nil && a.PromotedAt.AsTime().Sub(r.CreatedAt.AsTime()) > time.Second
}

// pass is a later wave's region given a rollout's new spec after an
// earlier wave's region ran it ready for its bake (brokenPromise).
type pass struct {
	later, earlier *ctrlv1.RolloutRegion
	// carried is when the later region's StatefulSet first turned to the
	// new spec.
	carried time.Time
	// margin is how much longer than its bake the earlier region ran it
	// ready before the later one got it.
	margin time.Duration
}

// droppedWave says how a rollout's plan dropped its strategy's named
// first wave ("" when it did not): its first wave is the strategy's "*"
// wave, told by its deadline (starDeadline). The checker's strategies all
// name a first wave, and a wave that names none of a deployment's
// regions must refuse the change, not give its place to the next wave.
func droppedWave(r *ctrlv1.Rollout) string {
	w := r.Strategy.GetWaves()
	if len(w) == 0 || w[0].GetDeadline().AsDuration() != starDeadline {
		return ""
	}
	return fmt.Sprintf("rollout of %s to revision %d (%s) began with its strategy's \"*\" wave (%s, deadline %s): the named wave before it was dropped, and %s got the change ungated",
		r.DeploymentId, r.Revision, r.State, strings.Join(w[0].Regions, ","), starDeadline, strings.Join(w[0].Regions, ","))
}

// clusterLog is what the verdict reads of a region's cluster: a
// rolloutcheck.ImageLog.
type clusterLog interface {
	History(name string) []rolloutcheck.Sighting
	Pods(owner string) []rolloutcheck.PodSighting
}

// countChecks counts an ended rollout's checks and how its checks ended
// it: a region failed on a check (its evidence "check ..."), failing or
// without a verdict within its deadline.
func (st *RolloutStats) countChecks(r *ctrlv1.Rollout) {
	if !checked(r) {
		return
	}
	st.Checked++
	if r.ToImage == ErrorsImage {
		st.Errors++
	}
	if r.State != "rolled_back" {
		return
	}
	for _, region := range r.Regions {
		if region.State == "failed" && strings.HasPrefix(region.Why, "check ") {
			st.OnMetrics++
			if strings.Contains(region.Why, "had no verdict") {
				st.NoVerdict++
			}
			return
		}
	}
}

// judgeChecks holds a checked rollout's passes to "no wave passes on an
// inconclusive check" (noVerdictPass) and counts them.
func (st *RolloutStats) judgeChecks(r *ctrlv1.Rollout, passes []pass, logs map[string]checkLog) []string {
	var violations []string
	for _, p := range passes {
		l, ok := logs[p.earlier.Region]
		if !ok {
			continue
		}
		v, found := noVerdictPass(r, p, errorRateCheck, l)
		if v != "" {
			violations = append(violations, v)
		}
		if !found.judged {
			st.CheckUnjudged++
			continue
		}
		st.CheckPasses++
		if found.afterOutage {
			st.AfterOutage++
			if found.sinceUp >= 0 && (st.SoonestAfterOutage == 0 || found.sinceUp < st.SoonestAfterOutage) {
				st.SoonestAfterOutage = found.sinceUp
			}
		}
	}
	return violations
}

// checkLogs is what the checks verdict reads of every region.
func (s *System) checkLogs() map[string]checkLog {
	logs := map[string]checkLog{}
	for name, r := range s.regions {
		logs[name] = checkLog{calls: r.link.syncCalls(), outages: r.metrics.outageLog()}
	}
	return logs
}

func (s *System) clusterLogs() map[string]clusterLog {
	logs := map[string]clusterLog{}
	for name, r := range s.regions {
		logs[name] = r.images
	}
	return logs
}

func stamp(t time.Time) string { return t.Format(time.StampMilli) }

// firstCarried is when a StatefulSet of history first turned to spec
// between from and to: created on it, or changed to it from another spec.
func firstCarried(history []rolloutcheck.Sighting, spec newSpec, from, to time.Time) (time.Time, bool) {
	on := map[string]bool{} // by namespace: the StatefulSet's last sighting was on spec
	for _, h := range history {
		if h.At.After(to) {
			break
		}
		now := !h.Deleted && spec.in(h.Image, h.Env)
		if now && !on[h.Namespace] && !h.At.Before(from) {
			return h.At, true
		}
		on[h.Namespace] = now
	}
	return time.Time{}, false
}

// proof is what an earlier wave's region showed of a rollout's new spec
// before a later wave got it.
type proof struct {
	// ready is its longest run, between the rollout's start and the cut,
	// of sightings of a StatefulSet on the new spec with every replica
	// ready (one still ready at the cut runs until it), and readyFrom
	// when that run began (zero: never ready).
	ready     time.Duration
	readyFrom time.Time
	// restart names a Pod of the new spec that restarted, and when; ""
	// when none did.
	restart string
	// last is how its StatefulSets looked at the cut.
	last string
}

// ranIt reads the region's proof from its StatefulSets' and Pods'
// sightings.
func ranIt(sets []rolloutcheck.Sighting, pods []rolloutcheck.PodSighting, spec newSpec, from, restartsFrom, cut time.Time) proof {
	var p proof
	since := map[string]time.Time{} // by namespace: when its current ready run began
	lastOf := map[string]rolloutcheck.Sighting{}
	end := func(ns string, at time.Time) {
		if s := since[ns]; !s.IsZero() {
			if run := at.Sub(s); p.readyFrom.IsZero() || run > p.ready {
				p.ready, p.readyFrom = run, s
			}
			since[ns] = time.Time{}
		}
	}
	for _, h := range sets {
		if h.At.After(cut) {
			break
		}
		lastOf[h.Namespace] = h
		if h.At.Before(from) {
			continue
		}
		if !h.Deleted && spec.in(h.Image, h.Env) && h.AllReady() {
			if since[h.Namespace].IsZero() {
				since[h.Namespace] = h.At
			}
		} else {
			end(h.Namespace, h.At)
		}
	}
	for ns := range since {
		end(ns, cut)
	}
	var last []string
	for _, ns := range slices.Sorted(maps.Keys(lastOf)) {
		last = append(last, describeSighting(lastOf[ns], spec))
	}
	p.last = strings.Join(last, "; ")
	if p.last == "" {
		p.last = "none (never there)"
	}
	restarts := map[string]int32{}
	for _, pod := range pods {
		if pod.At.After(cut) {
			break
		}
		if pod.At.Before(from) || !spec.in(pod.Image, pod.Env) {
			continue
		}
		if pod.At.Before(restartsFrom) { // its count at the resume: the baseline
			restarts[pod.UID] = pod.Restarts
			continue
		}
		before, seen := restarts[pod.UID]
		if pod.Restarts > before || !seen && pod.Restarts > 0 {
			p.restart = fmt.Sprintf("%s/%s, restart count %d at %s", pod.Namespace, pod.Name, pod.Restarts, stamp(pod.At))
			return p
		}
		restarts[pod.UID] = pod.Restarts
	}
	return p
}

// describeSighting says how a StatefulSet looked, for a violation.
func describeSighting(h rolloutcheck.Sighting, spec newSpec) string {
	at := fmt.Sprintf("%s/%s at %s: ", h.Namespace, h.Name, stamp(h.At))
	switch {
	case h.Deleted:
		return at + "deleted (stopped, or removed)"
	case h.Image != spec.image:
		return at + "on another spec (" + h.Image + ")"
	case !spec.in(h.Image, h.Env):
		return at + "on another spec (" + h.Image + ", another environment)"
	case h.Replicas == 0:
		return at + "scaled to 0"
	}
	return at + fmt.Sprintf("%d replicas, %d ready, %d updated (generation %d, status of %d)",
		h.Replicas, h.ReadyReplicas, h.UpdatedReplicas, h.Generation, h.ObservedGeneration)
}

// verdictState is what the rollout verdict keeps between looks: the
// rollouts it judged, and those that ended but wait for judgeAfter, with
// their new spec read already (the rows go with their deployment's
// delete, which may come first).
type verdictState struct {
	judged  map[string]bool
	pending map[string]endedRollout
	// planned are the rollouts whose plan was checked (droppedWave).
	planned map[string]bool
}

type endedRollout struct {
	r     *ctrlv1.Rollout
	spec  newSpec
	known bool
}

// rolloutVerdict holds every rollout that ended since the last verdict to
// its promise (brokenPromise). During a round (settled false) it judges
// those that ended less than judgeAfter ago at a later look, on what it
// read of them now. It counts the rollouts by outcome and returns the
// violations.
func (s *System) rolloutVerdict(ctx context.Context, vs *verdictState, stats *RolloutStats, settled bool) ([]string, error) {
	resp, err := s.control.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: 500})
	if err != nil {
		return nil, fmt.Errorf("list the rollouts: %w", err)
	}
	var planned []string
	for _, r := range resp.GetRollouts() {
		// A deployment deleted and deployed again numbers its revisions
		// from 1 again.
		key := fmt.Sprintf("%s@%d@%d", r.DeploymentId, r.Revision, r.CreatedAt.AsTime().UnixNano())
		if !vs.planned[key] {
			vs.planned[key] = true
			stats.Plans++
			if v := droppedWave(r); v != "" {
				planned = append(planned, v)
			}
		}
		if _, waiting := vs.pending[key]; vs.judged[key] || waiting || r.FinishedAt == nil {
			continue
		}
		spec, known, err := s.specOf(ctx, r)
		if err != nil {
			return nil, err // ctrld's database down on purpose: the next look reads it
		}
		vs.pending[key] = endedRollout{r: r, spec: spec, known: known}
	}
	violations := planned
	for _, key := range slices.Sorted(maps.Keys(vs.pending)) {
		e := vs.pending[key]
		r := e.r
		if !settled && time.Since(r.FinishedAt.AsTime()) < judgeAfter {
			continue
		}
		delete(vs.pending, key)
		vs.judged[key] = true
		checks := ""
		if checked(r) {
			checks = ", checked"
		}
		s.logf("  rollout of %s to revision %d (%s%s) ended %s: %s", r.DeploymentId, r.Revision, r.ToImage, checks, r.State, r.Reason)
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
		if failingImage(r.ToImage) && !failingImage(r.FromImage) {
			stats.Bad++
		}
		stats.countChecks(r)
		if !e.known {
			stats.Unjudged++
			continue
		}
		stats.Judged++
		found, passes, badPast := brokenPromise(r, e.spec, s.clusterLogs())
		stats.BadPast += badPast
		for _, p := range passes {
			if stats.Passes == 0 || p.margin < stats.Tightest {
				stats.Tightest = p.margin
			}
			stats.Passes++
		}
		if checked(r) && len(found) == 0 {
			found = stats.judgeChecks(r, passes, s.checkLogs())
		}
		stats.Broken += len(found)
		violations = append(violations, found...)
	}
	stats.WatchGaps = 0
	for _, name := range Regions {
		stats.WatchGaps += len(s.regions[name].images.Gaps())
	}
	return violations, nil
}
