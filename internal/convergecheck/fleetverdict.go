package convergecheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	entrollout "github.com/deploysync/deploysync/ent/rollout"
)

// rolloutObs is a rollout as the checker's reads of the database saw it
// over its life (the rows go with their deployment's delete).
type rolloutObs struct {
	id             int
	deployment     string
	workspace, env string
	created        time.Time
	end            time.Time // finished_at; the last look in flight when the row went; zero in flight
	breakGlass     bool
	spec           newSpec
	hash           string
	waves          [][]string
	queued         bool // seen queued
	start          map[string]time.Time
	waiting        map[string]time.Time // when each region was last seen not promoted
	lastSeen       time.Time
	judged         map[string]bool // the regions whose start the verdicts judged
	paced          bool
}

// markObs is a failed spec's mark as seen: from at (the failed
// rollout's end, else the mark's time) until lastSeen, the last read
// that found it (it goes when a rollout of the spec succeeds, or with
// its deployment: one deleted and deployed again may run the spec anew).
type markObs struct {
	rollout          int
	deployment, hash string
	at, lastSeen     time.Time
	judged           bool
}

// observer reads the rollouts in flight (and those that ended since its
// last read) and the failed specs' marks from the database every
// observeEvery: the wave starts' times (each region's promoted_at when
// first seen: an operator's resume moves it later) are the database's,
// and exact.
type observer struct {
	db *ent.Client

	mu       sync.Mutex
	rollouts map[int]*rolloutObs
	marks    map[int]*markObs
	since    time.Time
}

const observeEvery = 250 * time.Millisecond

func newObserver(db *ent.Client) *observer {
	return &observer{db: db, rollouts: map[int]*rolloutObs{}, marks: map[int]*markObs{}}
}

// run reads until ctx ends.
func (o *observer) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = o.poll(ctx) // the database down on purpose: the next read
		select {
		case <-ctx.Done():
		case <-time.After(observeEvery):
		}
	}
}

func (o *observer) poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	at := time.Now()
	o.mu.Lock()
	since := o.since
	o.mu.Unlock()
	q := o.db.Rollout.Query().WithDeployment(func(q *ent.DeploymentQuery) {
		q.Select(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID)
	})
	if !since.IsZero() {
		q = q.Where(entrollout.Or(entrollout.InFlightNotNil(), entrollout.UpdatedAtGT(since.Add(-2*time.Second))))
	}
	rows, err := q.All(ctx)
	if err != nil {
		return err
	}
	marks, err := o.db.FailedSpec.Query().All(ctx)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.since = at
	seen := map[int]bool{}
	for _, r := range rows {
		seen[r.ID] = true
		ob := o.rollouts[r.ID]
		if ob == nil {
			ob = &rolloutObs{id: r.ID, deployment: r.DeploymentID, created: r.CreatedAt, hash: r.ToSpec.Hash,
				spec:  newSpec{image: r.ToSpec.Image, env: r.ToSpec.Env},
				start: map[string]time.Time{}, waiting: map[string]time.Time{}, judged: map[string]bool{}}
			for _, w := range r.Strategy.Waves {
				ob.waves = append(ob.waves, w.Regions)
			}
			if d := r.Edges.Deployment; d != nil {
				ob.workspace, ob.env = d.WorkspaceID, d.EnvironmentID
			}
			o.rollouts[r.ID] = ob
		}
		ob.breakGlass = ob.breakGlass || r.BreakGlassBy != ""
		ob.queued = ob.queued || r.State == entrollout.StateQueued
		for region, st := range r.Regions {
			switch {
			case st.PromotedAt != nil && ob.start[region].IsZero():
				ob.start[region] = *st.PromotedAt
			case st.PromotedAt == nil && r.InFlight != nil:
				ob.waiting[region] = at
			}
		}
		if r.FinishedAt != nil {
			ob.end = *r.FinishedAt
		} else {
			ob.lastSeen = at
		}
	}
	for _, ob := range o.rollouts {
		if ob.end.IsZero() && !seen[ob.id] && !since.IsZero() {
			ob.end = ob.lastSeen // gone with its deployment since
		}
	}
	for _, m := range marks {
		if mo := o.marks[m.RolloutID]; mo != nil {
			mo.lastSeen = at
			continue
		}
		mo := &markObs{lastSeen: at, rollout: m.RolloutID, deployment: m.DeploymentID, hash: m.SpecHash, at: m.CreatedAt}
		if ob := o.rollouts[m.RolloutID]; ob != nil && !ob.end.IsZero() {
			mo.at = ob.end
		}
		o.marks[m.RolloutID] = mo
	}
	return nil
}

// startBounds is when region's wave of r started, as closely as the
// checker knows it: from lo through hi. hi is the promotion time first
// seen, or the first time the region's StatefulSet carried the new spec
// (the API server's watch) if earlier; lo the last look that saw it not
// promoted, or the rollout's creation (no later than hi).
func (r *rolloutObs) startBounds(region string, logs map[string]clusterLog) (lo, hi time.Time, ok bool) {
	hi = r.start[region]
	if hi.IsZero() {
		return lo, hi, false
	}
	if l := logs[region]; l != nil {
		to := r.end
		if to.IsZero() {
			to = never
		}
		if tb, carried := firstCarried(l.History(r.deployment), r.spec, r.created, to); carried && tb.Before(hi) {
			hi = tb
		}
	}
	lo = r.created
	if w := r.waiting[region]; w.After(lo) {
		lo = w
	}
	if lo.After(hi) {
		lo = hi
	}
	return lo, hi, true
}

// waveOf is the index of the wave that has region (-1: none).
func (r *rolloutObs) waveOf(region string) int {
	return slices.IndexFunc(r.waves, func(w []string) bool { return slices.Contains(w, region) })
}

// takenThrough tells whether r went through the holds on purpose at hi:
// it was taken through, and a break-glass for its deployment was sent by
// then (a change made with one is sent before the rollout is made).
func (r *rolloutObs) takenThrough(hi time.Time, sends []sendRec) bool {
	if !r.breakGlass {
		return false
	}
	return slices.ContainsFunc(sends, func(s sendRec) bool {
		return s.deployment == r.deployment && !s.at.After(hi) && s.at.After(r.created.Add(-15*time.Second))
	})
}

// endAt is when r stopped being in flight (never while it is).
func (r *rolloutObs) endAt() time.Time {
	if r.end.IsZero() {
		return never
	}
	return r.end
}

// canaryEnd is when r's first wave stopped being in progress: its next
// wave's start (the earliest it may have been) or r's end.
func (r *rolloutObs) canaryEnd(logs map[string]clusterLog) time.Time {
	end := r.endAt()
	if len(r.waves) > 1 {
		for _, region := range r.waves[1] {
			if lo, _, ok := r.startBounds(region, logs); ok && lo.Before(end) {
				end = lo
			}
		}
	}
	return end
}

// firstStart is when r's first wave started (zero: not seen started).
func (r *rolloutObs) firstStart() time.Time {
	var t time.Time
	if len(r.waves) == 0 {
		return t
	}
	for _, region := range r.waves[0] {
		if s := r.start[region]; !s.IsZero() && (t.IsZero() || s.Before(t)) {
			t = s
		}
	}
	return t
}

// endSlack is how much later than the database says a rollout may have
// stopped counting for a start: the end's transaction takes its time
// before it commits, without the fleet's lock, so a start whose time is
// a moment after it may still have read it in flight.
const endSlack = time.Second

// reappearAfter is how long after a failed rollout's end a region's
// StatefulSet may still first turn to its spec without a retry: the
// agent of a region paused (up to 3.3 s) or cut off applies the
// promotion and then the rollback once it is back.
const reappearAfter = 5 * time.Second

// fleetVerdict holds every wave start the checker saw to the fleet's
// controls standing then, and every failed spec to its mark; it returns
// the violations and counts what it judged.
func (s *System) fleetVerdict(o *observer, m *fleetModel) []string {
	logs := s.clusterLogs()
	o.mu.Lock()
	defer o.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	var violations []string
	all := slices.Sorted(maps.Keys(o.rollouts))
	for _, id := range all {
		r := o.rollouts[id]
		if r.queued && !r.judged["queued"] {
			r.judged["queued"] = true
			m.stats.Queued++
		}
		for _, region := range slices.Sorted(maps.Keys(r.start)) {
			if r.judged[region] {
				continue
			}
			lo, hi, _ := r.startBounds(region, logs)
			if r.end.IsZero() && time.Since(hi) < 2*time.Second {
				continue // the watch may not have seen it yet: at the next verdict
			}
			r.judged[region] = true
			m.stats.Starts++
			if r.takenThrough(hi, m.breakGlass) {
				continue
			}
			what := fmt.Sprintf("rollout of %s (id %d, %s/%s) started %s's wave %d between %s and %s", r.deployment, r.id,
				r.workspace, r.env, region, r.waveOf(region)+1, stamp(lo), stamp(hi))
			violations = append(violations, windowViolations(r, region, lo, hi, what, m.windows)...)
			violations = append(violations, haltViolations(r, region, lo, hi, what, m.halts)...)
		}
		if t := r.firstStart(); !t.IsZero() && !r.paced && (!r.end.IsZero() || time.Since(t) > 2*time.Second) {
			r.paced = true
			m.stats.Paced++
			if !r.takenThrough(t, m.breakGlass) {
				violations = append(violations, paceViolations(r, t, o.rollouts, m.bounds, logs)...)
			}
		}
	}
	violations = append(violations, s.failedSpecViolations(o, m, logs)...)
	m.stats.Violations += len(violations)
	return violations
}

// windowViolations: no wave starts while a window covering its
// environment is closed, that was set (answered) before the start and
// neither replaced nor deleted (sent) until after it.
func windowViolations(r *rolloutObs, region string, lo, hi time.Time, what string, windows []*windowRec) []string {
	var out []string
	for _, w := range windows {
		if !w.scope.coversEnv(r.workspace, r.env) || !w.from.Before(lo) || !hi.Before(w.until) || !w.closedThroughout(lo, hi) {
			continue
		}
		out = append(out, fmt.Sprintf("%s, while freeze window %s of %s was closed (set at %s, %s)", what, w.name, w.scope,
			stamp(w.from), w.describe()))
	}
	return out
}

func (w windowRec) describe() string {
	if w.every != nil {
		return fmt.Sprintf("recurring, %s a firing", w.duration)
	}
	return fmt.Sprintf("closed from %s until %s", stamp(w.starts), stamp(w.ends))
}

// haltViolations: no wave starts in a halt's scope after its answer
// returned until its lift was sent.
func haltViolations(r *rolloutObs, region string, lo, hi time.Time, what string, halts []*haltRec) []string {
	var out []string
	wave := r.waveOf(region)
	for _, h := range halts {
		in := h.scope.coversEnv(r.workspace, r.env)
		if h.scope.region != "" {
			in = wave >= 0 && slices.Contains(r.waves[wave], h.scope.region)
		}
		if !in || !h.answered.Before(lo) || !hi.Before(h.lifted) {
			continue
		}
		lifted := "standing"
		if h.lifted != never {
			lifted = "lifted at " + stamp(h.lifted)
		}
		out = append(out, fmt.Sprintf("%s, under halt #%d of %s (answered at %s, %s)", what, h.id, h.scope, stamp(h.answered), lifted))
	}
	return out
}

// paceViolations: a first wave's start (at t, the database's time) never
// makes a bound in force exceeded: an environment's rollouts started and
// in flight, a region's first waves in progress, counting those that
// started before it (starts are ordered by the fleet's lock) and were
// still in flight a moment after it (endSlack).
func paceViolations(r *rolloutObs, t time.Time, rollouts map[int]*rolloutObs, bounds []*boundRec, logs map[string]clusterLog) []string {
	var out []string
	for _, b := range bounds {
		if !b.from.Before(t) || !t.Before(b.until) {
			continue
		}
		var counted []string
		switch {
		case b.scope.region != "":
			if len(r.waves) == 0 || !slices.Contains(r.waves[0], b.scope.region) {
				continue
			}
			for _, o := range rollouts {
				if s := o.firstStart(); o.id != r.id && !s.IsZero() && s.Before(t) && len(o.waves) > 0 &&
					slices.Contains(o.waves[0], b.scope.region) && o.canaryEnd(logs).After(t.Add(endSlack)) {
					counted = append(counted, fmt.Sprintf("%s (id %d, from %s)", o.deployment, o.id, stamp(s)))
				}
			}
		default:
			if !b.scope.coversEnv(r.workspace, r.env) {
				continue
			}
			for _, o := range rollouts {
				if s := o.firstStart(); o.id != r.id && !s.IsZero() && s.Before(t) && o.workspace == r.workspace && o.env == r.env &&
					o.endAt().After(t.Add(endSlack)) {
					counted = append(counted, fmt.Sprintf("%s (id %d, from %s)", o.deployment, o.id, stamp(s)))
				}
			}
		}
		if len(counted)+1 > b.max {
			slices.Sort(counted)
			out = append(out, fmt.Sprintf("rollout of %s (id %d, %s/%s) started its first wave at %s beyond the pacing bound of %d on %s (set at %s): already in progress %v",
				r.deployment, r.id, r.workspace, r.env, stamp(t), b.max, b.scope, stamp(b.from), counted))
		}
	}
	return out
}

// failedSpecViolations: a spec a gate failed never rolls out again
// without a retry: while its mark stands, no rollout of it is made after
// the failure, and no region's StatefulSet turns to it (reappearAfter
// the failure: an immediate change makes no rollout), unless a retry
// with a reason was sent for it since.
func (s *System) failedSpecViolations(o *observer, m *fleetModel, logs map[string]clusterLog) []string {
	var out []string
	retried := func(mk *markObs, by time.Time) bool {
		return slices.ContainsFunc(m.retries, func(r sendRec) bool {
			return r.deployment == mk.deployment && r.hash == mk.hash && r.at.After(mk.at.Add(-time.Second)) && !r.at.After(by)
		})
	}
	for _, id := range slices.Sorted(maps.Keys(o.marks)) {
		mk := o.marks[id]
		if mk.judged {
			continue
		}
		failed := o.rollouts[mk.rollout]
		for _, rid := range slices.Sorted(maps.Keys(o.rollouts)) {
			r := o.rollouts[rid]
			if r.id == mk.rollout || r.deployment != mk.deployment || r.hash != mk.hash || !r.created.After(mk.at) || !r.created.Before(mk.lastSeen) {
				continue
			}
			if !retried(mk, r.created.Add(time.Second)) {
				mk.judged = true
				out = append(out, fmt.Sprintf("rollout %d of %s made at %s rolls out the spec rollout %d rolled back for a failed gate at %s, with no retry (retry_failed_reason) sent since",
					r.id, r.deployment, stamp(r.created), mk.rollout, stamp(mk.at)))
			}
		}
		if failed == nil {
			continue
		}
		for _, region := range Regions {
			l := logs[region]
			if l == nil {
				continue
			}
			if tb, ok := firstCarried(l.History(mk.deployment), failed.spec, mk.at.Add(reappearAfter), mk.lastSeen); ok && !retried(mk, tb) {
				mk.judged = true
				out = append(out, fmt.Sprintf("%s's StatefulSet of %s turned at %s to the spec rollout %d rolled back for a failed gate at %s, with no retry (retry_failed_reason) sent since",
					region, mk.deployment, stamp(tb), mk.rollout, stamp(mk.at)))
			}
		}
	}
	return out
}
