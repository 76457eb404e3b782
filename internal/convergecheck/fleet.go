package convergecheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/failedspec"
	entrollout "github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// FleetStats counts what the fleet operator did with the fleet's
// controls, and what the fleet verdicts found.
type FleetStats struct {
	// Halts and Resumes count the halts made and lifted (the round's end
	// lifting what still stands included); HaltChecks the halts after
	// whose answer the checker read every rollout in flight in their
	// scope (paused by it, queued, or taken through on purpose).
	Halts, Resumes, HaltChecks int
	// Windows counts the one-off freeze windows set, Recurring the
	// recurring ones, WindowDeletes the windows deleted.
	Windows, Recurring, WindowDeletes int
	// Bounds counts the pacing bounds set, BoundRemoves those removed.
	Bounds, BoundRemoves int
	// Queued counts the rollouts seen queued; BreakGlasses the rollouts
	// taken through the holds on purpose (an action on one, or a change
	// made with a break-glass reason).
	Queued, BreakGlasses int
	// Retries counts the retries of a failed spec with a reason that
	// ctrld took; RetriesRefused the updates to a failed spec without one
	// that it refused (as it must).
	Retries, RetriesRefused int
	// Starts counts the regions' wave starts the window and halt verdicts
	// held to the controls standing then; Paced the first-wave starts
	// held to the pacing bounds.
	Starts, Paced int
	// Immediate counts the immediate changes ctrld took that were held to
	// the windows and halts standing through their call.
	Immediate int
	// Violations counts what the fleet verdicts found: must be 0.
	Violations int
}

// scopeRec is where a control applies, as the checker set it: an
// environment, a region, or (all empty) everywhere.
type scopeRec struct{ workspace, env, region string }

func (s scopeRec) proto() *ctrlv1.FleetScope {
	return &ctrlv1.FleetScope{WorkspaceId: s.workspace, EnvironmentId: s.env, Region: s.region}
}

func (s scopeRec) String() string {
	switch {
	case s.region != "":
		return "region " + s.region
	case s.env != "":
		return "environment " + s.workspace + "/" + s.env
	}
	return "everywhere"
}

// coversEnv tells whether the scope (no region) is everywhere or the
// environment.
func (s scopeRec) coversEnv(workspace, env string) bool {
	return s.region == "" && (s.env == "" || s.workspace == workspace && s.env == env)
}

// never is the end of a control that stands until the run ends.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// haltRec is a halt the checker made: it holds from the moment its
// answer returned (the halt committed before) until the lift was sent.
type haltRec struct {
	id       int64
	scope    scopeRec
	answered time.Time
	lifted   time.Time // never while it stands
}

// windowRec is a freeze window the checker set: in force from its
// answer (committed before) until the next set of its name or its delete
// was sent.
type windowRec struct {
	name     string
	scope    scopeRec
	starts   time.Time // one-off
	ends     time.Time
	every    cron.Schedule // recurring, with its duration
	duration time.Duration
	from     time.Time
	until    time.Time
}

// closedThroughout tells whether the window is closed from lo through hi
// (one firing, for a recurring one).
func (w windowRec) closedThroughout(lo, hi time.Time) bool {
	if w.every == nil {
		return !lo.Before(w.starts) && hi.Before(w.ends)
	}
	f := w.every.Next(lo.Add(-w.duration))
	return !f.After(lo) && hi.Before(f.Add(w.duration))
}

// boundRec is a pacing bound the checker set: in force from its answer
// until the next set of its scope or its removal was sent.
type boundRec struct {
	scope scopeRec
	max   int
	from  time.Time
	until time.Time
}

// sendRec is a call sent for a deployment at a time: a break-glass, or a
// retry of a failed spec (hash) with a reason.
type sendRec struct {
	deployment, hash string
	at               time.Time
}

// fleetModel is what the fleet operator did with the fleet's controls,
// for the verdicts: shared by the round's goroutines and kept over the
// run.
type fleetModel struct {
	mu         sync.Mutex
	halts      []*haltRec
	windows    []*windowRec
	bounds     []*boundRec
	breakGlass []sendRec
	retries    []sendRec
	stats      FleetStats
	violations []string
}

func (m *fleetModel) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
	m.stats.Violations++
}

func (m *fleetModel) tally(f func(*FleetStats)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.stats)
}

// snapshot is the counts so far.
func (m *fleetModel) snapshot() FleetStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// takeViolations returns the violations found since the last call.
func (m *fleetModel) takeViolations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.violations
	m.violations = nil
	return v
}

// windowEnds ends the window of the name in force (a set or a delete of
// the name was sent at).
func (m *fleetModel) windowEnds(name string, at time.Time) {
	for _, w := range m.windows {
		if w.name == name && w.until == never {
			w.until = at
		}
	}
}

// boundEnds ends the bound of the scope in force.
func (m *fleetModel) boundEnds(scope scopeRec, at time.Time) {
	for _, b := range m.bounds {
		if b.scope == scope && b.until == never {
			b.until = at
		}
	}
}

// windowNames are the freeze windows' names the fleet operator uses.
var windowNames = []string{"w1", "w2", "w3"}

// fleetOperator is the on-call engineer steering the fleet: through a
// random ctrld replica it halts and resumes (everything, an environment,
// a region), opens and closes freeze windows, sets and removes pacing
// bounds, breaks glass for held rollouts, rolls good images out in
// waves (so that there are rollouts to hold) and retries specs a gate
// failed, with and without a reason.
type fleetOperator struct {
	clients []ctrlv1.OperatorServiceClient // the replicas it may act through
	db      *store.DB
	rng     *rand.Rand
	model   *fleetModel
	count   *opCounter
}

// fleetName is the fleet operator's name, the actor of its actions.
const fleetName = "fleet-operator"

// run acts until ctx ends, with random pauses: first it bounds the
// canaries of the region the other operators' rollouts start in (or an
// environment's rollouts), and rolls out twice, so that canaries bake
// and queue while the round's controls come and go.
func (f *fleetOperator) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var op string
		var err error
		switch {
		case i == 0:
			scope := scopeRec{region: Regions[0]}
			if f.rng.IntN(4) == 0 {
				e := pick(f.rng, environments)
				scope = scopeRec{workspace: e.workspace, env: e.id}
			}
			op, err = f.setBound(callCtx, scope, 1+f.rng.IntN(2))
		case i < 3:
			op, err = f.rollout(callCtx)
		default:
			op, err = f.call(callCtx)
		}
		cancel()
		if op != "" {
			f.count.add(op, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+f.rng.IntN(300)) * time.Millisecond):
		}
	}
}

// closingFreeze is, in every other round, a freeze of every environment
// declared as the round's operations end, closed from 0.2-2 s later for
// 2-5 s: the next waves of the rollouts whose canaries bake then, which
// come as they settle after the round, meet it.
func (f *fleetOperator) closingFreeze(ctx context.Context) {
	if f.rng.IntN(2) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now, err := store.Now(ctx, f.db.SQL)
	if err != nil {
		return
	}
	rec := &windowRec{name: "closing", starts: now.Add(200*time.Millisecond + time.Duration(f.rng.Int64N(int64(1800*time.Millisecond)))), until: never}
	rec.ends = rec.starts.Add(2*time.Second + time.Duration(f.rng.Int64N(int64(3*time.Second))))
	f.model.mu.Lock()
	f.model.windowEnds(rec.name, time.Now())
	f.model.mu.Unlock()
	_, err = f.client().SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: &ctrlv1.FreezeWindow{Name: rec.name,
		Scope: rec.scope.proto(), StartsAt: timestamppb.New(rec.starts), EndsAt: timestamppb.New(rec.ends), Reason: "convergecheck: end of day"}})
	f.count.add("fleet-window", err)
	if err != nil {
		return
	}
	rec.from = time.Now()
	f.model.mu.Lock()
	f.model.windows = append(f.model.windows, rec)
	f.model.stats.Windows++
	f.model.mu.Unlock()
}

func (f *fleetOperator) client() ctrlv1.OperatorServiceClient { return pick(f.rng, f.clients) }

func (f *fleetOperator) scope(regions bool) scopeRec {
	switch n := f.rng.IntN(4); {
	case n == 0:
		return scopeRec{}
	case n == 1 && regions:
		return scopeRec{region: pick(f.rng, Regions)}
	default:
		e := pick(f.rng, environments)
		return scopeRec{workspace: e.workspace, env: e.id}
	}
}

// call makes one random fleet call and names its operation ("" when it
// made none).
func (f *fleetOperator) call(ctx context.Context) (string, error) {
	if f.rng.IntN(3) == 0 { // a spec failed: retry it while its mark stands (the deployment may go soon)
		if op, err := f.retry(ctx); op != "" {
			return op, err
		}
	}
	switch n := f.rng.IntN(24); {
	case n < 2:
		return f.halt(ctx)
	case n < 5:
		return f.resume(ctx)
	case n < 9:
		return f.setWindow(ctx)
	case n < 10:
		return f.deleteWindow(ctx)
	case n < 13:
		return f.pace(ctx)
	case n < 15:
		return f.breakGlass(ctx)
	default:
		return f.rollout(ctx)
	}
}

func (f *fleetOperator) halt(ctx context.Context) (string, error) {
	f.model.mu.Lock()
	standing := 0
	for _, h := range f.model.halts {
		if h.lifted == never {
			standing++
		}
	}
	f.model.mu.Unlock()
	if standing >= 2 {
		return f.resume(ctx)
	}
	scope := f.scope(true)
	resp, err := f.client().HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Scope: scope.proto(), Reason: "convergecheck: incident"})
	if err != nil {
		return "fleet-halt", err
	}
	h := &haltRec{id: resp.GetHalt().GetId(), scope: scope, answered: time.Now(), lifted: never}
	f.model.mu.Lock()
	f.model.halts = append(f.model.halts, h)
	f.model.stats.Halts++
	f.model.mu.Unlock()
	f.checkHalted(ctx, h)
	return "fleet-halt", nil
}

// checkHalted reads, after a halt's answer, every rollout in flight in
// its scope: none may be progressing but one taken through on purpose
// (a halt pauses the progressing ones as it is made, and holds every
// wave start in its scope, so none can have started since).
func (f *fleetOperator) checkHalted(ctx context.Context, h *haltRec) {
	rows, err := f.db.Ent.Rollout.Query().Where(entrollout.InFlightNotNil(), entrollout.StateEQ(entrollout.StateProgressing)).
		WithDeployment().All(ctx)
	if err != nil {
		return // the database down on purpose: not checked
	}
	f.model.tally(func(s *FleetStats) { s.HaltChecks++ })
	for _, r := range rows {
		if r.BreakGlassBy != "" || r.Edges.Deployment == nil {
			continue
		}
		d := r.Edges.Deployment
		in := h.scope.coversEnv(d.WorkspaceID, d.EnvironmentID)
		if h.scope.region != "" {
			for _, w := range []int{r.Wave, r.Wave + 1} {
				if w < len(r.Strategy.Waves) && slices.Contains(r.Strategy.Waves[w].Regions, h.scope.region) {
					in = true
				}
			}
		}
		if in {
			f.model.violate("halt #%d of %s answered at %s, yet the rollout of %s to revision %d (wave %d) is progressing after it: not paused by it, not taken through",
				h.id, h.scope, stamp(h.answered), r.DeploymentID, r.Revision, r.Wave+1)
		}
	}
}

func (f *fleetOperator) resume(ctx context.Context) (string, error) {
	f.model.mu.Lock()
	var standing []*haltRec
	for _, h := range f.model.halts {
		if h.lifted == never {
			standing = append(standing, h)
		}
	}
	f.model.mu.Unlock()
	if len(standing) == 0 {
		return f.halt(ctx)
	}
	h := pick(f.rng, standing)
	return "fleet-resume", f.lift(ctx, f.client(), h)
}

// lift resumes the halt; from the moment it is sent the halt may be
// lifted, so the verdicts hold nothing to it after.
func (f *fleetOperator) lift(ctx context.Context, c ctrlv1.OperatorServiceClient, h *haltRec) error {
	sent := time.Now()
	f.model.mu.Lock()
	if h.lifted == never {
		h.lifted = sent
	}
	f.model.mu.Unlock()
	_, err := c.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{HaltId: h.id})
	if err == nil {
		f.model.tally(func(s *FleetStats) { s.Resumes++ })
	}
	return err
}

// setWindow sets a one-off window on the database's clock that closes
// within 2 s and opens again 1-5 s later, so that it closes and opens
// while the checker runs (half the time on the environment of a rollout
// whose wave bakes, as a freeze declared while rollouts bake);
// now and then a recurring one (every other minute, for a minute:
// cron's minutes are too coarse to open and close within a round, so it
// is closed or open for the few seconds it lives).
func (f *fleetOperator) setWindow(ctx context.Context) (string, error) {
	scope := f.scope(false)
	if f.rng.IntN(2) == 0 {
		resp, err := f.client().ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 100})
		if err != nil {
			return "fleet-look", err
		}
		var baking []*ctrlv1.Rollout
		for _, r := range resp.GetRollouts() {
			if r.State == "progressing" && r.EnvironmentId != "" && slices.ContainsFunc(r.Regions, func(g *ctrlv1.RolloutRegion) bool { return g.State == "baking" }) {
				baking = append(baking, r)
			}
		}
		if len(baking) > 0 {
			r := pick(f.rng, baking)
			scope = scopeRec{workspace: r.WorkspaceId, env: r.EnvironmentId}
		}
	}
	now, err := store.Now(ctx, f.db.SQL)
	if err != nil {
		return "", nil // the database down on purpose
	}
	name := pick(f.rng, windowNames)
	w := &ctrlv1.FreezeWindow{Name: name, Scope: scope.proto(), Reason: "convergecheck: freeze"}
	rec := &windowRec{name: name, scope: scope, until: never}
	op := "fleet-window"
	if f.rng.IntN(8) == 0 {
		const schedule = "*/2 * * * *"
		every, err := cron.ParseStandard(schedule)
		if err != nil {
			panic(err) // a literal
		}
		w.Schedule, w.TimeZone, w.Duration = schedule, "UTC", durationpb.New(time.Minute)
		rec.every, rec.duration, op = every, time.Minute, "fleet-window-recurring"
	} else {
		rec.starts = now.Add(time.Duration(f.rng.Int64N(int64(2 * time.Second))))
		rec.ends = rec.starts.Add(time.Second + time.Duration(f.rng.Int64N(int64(4*time.Second))))
		w.StartsAt, w.EndsAt = timestamppb.New(rec.starts), timestamppb.New(rec.ends)
	}
	sent := time.Now()
	f.model.mu.Lock()
	f.model.windowEnds(name, sent)
	f.model.mu.Unlock()
	if _, err := f.client().SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: w}); err != nil {
		return op, err
	}
	rec.from = time.Now()
	f.model.mu.Lock()
	f.model.windows = append(f.model.windows, rec)
	if rec.every != nil {
		f.model.stats.Recurring++
	} else {
		f.model.stats.Windows++
	}
	f.model.mu.Unlock()
	return op, nil
}

func (f *fleetOperator) deleteWindow(ctx context.Context) (string, error) {
	name := pick(f.rng, windowNames)
	f.model.mu.Lock()
	f.model.windowEnds(name, time.Now())
	f.model.mu.Unlock()
	_, err := f.client().DeleteFreezeWindow(ctx, &ctrlv1.DeleteFreezeWindowRequest{Name: name})
	if err == nil {
		f.model.tally(func(s *FleetStats) { s.WindowDeletes++ })
	}
	return "fleet-window-delete", err
}

// pace sets a bound of 1 or 2 on an environment's rollouts in flight or a
// region's canaries, or removes one.
func (f *fleetOperator) pace(ctx context.Context) (string, error) {
	scope := f.scope(true)
	if scope == (scopeRec{}) {
		scope = scopeRec{region: pick(f.rng, Regions)}
	}
	if f.rng.IntN(3) == 0 {
		f.model.mu.Lock()
		f.model.boundEnds(scope, time.Now())
		f.model.mu.Unlock()
		_, err := f.client().SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: scope.proto(), Remove: true})
		if err == nil {
			f.model.tally(func(s *FleetStats) { s.BoundRemoves++ })
		}
		return "fleet-pace-remove", err
	}
	return f.setBound(ctx, scope, 1+f.rng.IntN(2))
}

// setBound sets the scope's bound to max.
func (f *fleetOperator) setBound(ctx context.Context, scope scopeRec, max int) (string, error) {
	f.model.mu.Lock()
	f.model.boundEnds(scope, time.Now())
	f.model.mu.Unlock()
	_, err := f.client().SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: scope.proto(), Max: int32(max)})
	if err != nil {
		return "fleet-pace", err
	}
	f.model.mu.Lock()
	f.model.bounds = append(f.model.bounds, &boundRec{scope: scope, max: max, from: time.Now(), until: never})
	f.model.stats.Bounds++
	f.model.mu.Unlock()
	return "fleet-pace", nil
}

// breakGlass takes a held rollout (queued, or paused by a halt) through
// the holds.
func (f *fleetOperator) breakGlass(ctx context.Context) (string, error) {
	c := f.client()
	resp, err := c.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 100})
	if err != nil {
		return "fleet-look", err
	}
	var held []*ctrlv1.Rollout
	for _, r := range resp.GetRollouts() {
		if r.BreakGlassBy == "" && (r.State == "queued" || r.HaltId != 0 || r.Held != "") {
			held = append(held, r)
		}
	}
	if len(held) == 0 {
		return f.rollout(ctx)
	}
	r := pick(f.rng, held)
	f.sentBreakGlass(r.DeploymentId)
	_, err = c.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: r.DeploymentId, Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS,
		Reason: "convergecheck: the fix that ends the incident"})
	if err == nil {
		f.model.tally(func(s *FleetStats) { s.BreakGlasses++ })
	}
	return "fleet-break-glass", err
}

func (f *fleetOperator) sentBreakGlass(id string) {
	f.model.mu.Lock()
	defer f.model.mu.Unlock()
	f.model.breakGlass = append(f.model.breakGlass, sendRec{deployment: id, at: time.Now()})
}

// rollout rolls a good image out in waves (the holds have something to
// hold), now and then with a break-glass reason: of a deployment with no
// rollout in flight, its canary one of its regions, or of a new one in
// every region.
func (f *fleetOperator) rollout(ctx context.Context) (string, error) {
	c := f.client()
	list, err := c.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		return "fleet-look", err
	}
	flying, err := c.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 100})
	if err != nil {
		return "fleet-look", err
	}
	var candidates []*ctrlv1.DeploymentSummary
	for _, d := range list.GetDeployments() {
		if len(d.Regions) > 0 && !slices.ContainsFunc(flying.GetRollouts(), func(r *ctrlv1.Rollout) bool { return r.DeploymentId == d.DeploymentId }) {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) == 0 || f.rng.IntN(4) == 0 {
		env := pick(f.rng, environments)
		_, err := c.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: pick(f.rng, deploymentIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Image: pick(f.rng, images), CpuMillicores: 50, MemoryMib: 64, Regions: Regions, Replicas: 1})
		return "deploy", err
	}
	d := pick(f.rng, candidates)
	if f.rng.IntN(5) == 0 {
		return f.immediate(ctx, c, d)
	}
	image, op := pick(f.rng, images), "fleet-rollout"
	if f.rng.IntN(3) == 0 { // its failure marks the spec failed: something to retry
		image, op = BadImage, "fleet-rollout-bad"
	}
	req := &ctrlv1.UpdateDeploymentRequest{DeploymentId: d.DeploymentId, Image: &image, Env: map[string]string{"REV": fmt.Sprint(f.rng.IntN(1 << 30))},
		Rollout: waves([]string{pick(f.rng, d.Regions).Region}, rolloutBake)}
	if f.rng.IntN(6) == 0 {
		req.BreakGlassReason, op = "convergecheck: hotfix", "fleet-rollout-break-glass"
		f.sentBreakGlass(d.DeploymentId)
	}
	_, err = c.UpdateDeployment(ctx, req)
	if err == nil && req.BreakGlassReason != "" {
		f.model.tally(func(s *FleetStats) { s.BreakGlasses++ })
	}
	return op, err
}

// immediate changes d everywhere at once (an empty strategy, as
// --immediate sends), which a closed window or a standing halt must
// refuse: it has no rollout to wait in (judgeImmediate).
func (f *fleetOperator) immediate(ctx context.Context, c ctrlv1.OperatorServiceClient, d *ctrlv1.DeploymentSummary) (string, error) {
	image, rev, sent := pick(f.rng, images), fmt.Sprint(f.rng.IntN(1<<30)), time.Now()
	resp, err := c.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: d.DeploymentId, Image: &image,
		Env: map[string]string{"REV": rev}, Rollout: &ctrlv1.RolloutStrategy{}})
	if err == nil {
		for _, v := range judgeImmediate(ctx, f.db.Ent, f.model, immediateChange{deployment: d.DeploymentId, rev: rev, revision: resp.GetRevision(),
			sent: sent, answered: time.Now()}) {
			f.count.violate("%s", v)
		}
	}
	return "fleet-immediate", err
}

// failedText is in ctrld's refusal of a change to a spec a gate failed
// (desired.ErrFailedSpec).
const failedText = "failed before"

// retry updates a deployment to a spec a rollout of it rolled back for a
// failed gate: without a reason, which ctrld must refuse as
// FailedPrecondition (unless the mark went meanwhile: the deployment
// deleted, or another retry of it succeeded), or with one, which it
// takes (or refuses for the deployment's state: a rollout in flight).
func (f *fleetOperator) retry(ctx context.Context) (string, error) {
	marks, err := f.db.Ent.FailedSpec.Query().All(ctx)
	if err != nil {
		return "", nil // the database down on purpose
	}
	flying, err := f.db.Ent.Rollout.Query().Where(entrollout.InFlightNotNil()).All(ctx)
	if err != nil {
		return "", nil
	}
	marks = slices.DeleteFunc(marks, func(m *ent.FailedSpec) bool { // a rollout in flight refuses any update
		return slices.ContainsFunc(flying, func(r *ent.Rollout) bool { return r.DeploymentID == m.DeploymentID })
	})
	if len(marks) == 0 {
		return "", nil
	}
	mark := pick(f.rng, marks)
	failed, err := f.db.Ent.Rollout.Get(ctx, mark.RolloutID)
	if err != nil {
		return "", nil // gone with its deployment meanwhile
	}
	spec := failed.ToSpec
	image := spec.Image
	bake := rolloutBake
	if _, ok := spec.Env[kubetest.CrashAfterEnv]; ok || failingImage(image) && image != BadImage {
		bake = crashBake
	}
	strategy := waves(failed.Strategy.Waves[0].Regions, bake)
	if image == ErrorsImage {
		strategy.Checks = errorRateChecks()
	}
	req := &ctrlv1.UpdateDeploymentRequest{DeploymentId: mark.DeploymentID, Image: &image, Env: spec.Env, ReplaceEnv: true, Rollout: strategy}
	if f.rng.IntN(2) == 0 {
		req.RetryFailedReason = "convergecheck: fixed the registry, try again"
		f.model.mu.Lock()
		f.model.retries = append(f.model.retries, sendRec{deployment: mark.DeploymentID, hash: spec.Hash, at: time.Now()})
		f.model.mu.Unlock()
		_, err := f.client().UpdateDeployment(ctx, req)
		if err == nil {
			f.model.tally(func(s *FleetStats) { s.Retries++ })
		}
		return "fleet-retry-failed", err
	}
	_, err = f.client().UpdateDeployment(ctx, req)
	code := status.Code(err)
	if code == codes.FailedPrecondition && strings.Contains(err.Error(), failedText) {
		f.model.tally(func(s *FleetStats) { s.RetriesRefused++ })
	}
	if code == codes.OK {
		// Taken: a violation if the mark stood before the call and still
		// stands after it (so the deployment was neither deleted nor its
		// spec proven meanwhile).
		after, aerr := f.db.Ent.FailedSpec.Query().Where(failedspec.ID(mark.ID), failedspec.RolloutID(mark.RolloutID)).Exist(ctx)
		if aerr == nil && after {
			f.model.violate("an update of %s to the spec rollout %d rolled back for a failed gate (%s) was taken without retry_failed_reason",
				mark.DeploymentID, mark.RolloutID, clip(mark.Reason, 120))
		}
	}
	return "fleet-same-failed-spec", err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// liftAll ends the round's fleet controls, as on-call would before the
// checker waits for the rollouts to end: the rollouts still queued are
// aborted (each would take its every wave's bake from now), every halt
// that stands is
// lifted, every recurring window deleted (the one-off ones open again
// by themselves within seconds, while the rollouts settle), every bound
// removed. What stands is read from ctrld (GetFleet), so a control whose
// answer was lost goes too.
func (s *System) liftAll(ctx context.Context, m *fleetModel, f *fleetOperator) error {
	var fleetNow *ctrlv1.GetFleetResponse
	if err := retryControl(ctx, func(ctx context.Context) (err error) {
		fleetNow, err = s.control.GetFleet(ctx, &ctrlv1.GetFleetRequest{})
		return err
	}); err != nil {
		return fmt.Errorf("read the fleet's controls: %w", err)
	}
	for _, r := range fleetNow.GetRollouts() {
		if r.State != "queued" {
			continue
		}
		fence := &ctrlv1.RolloutFence{RolloutId: r.Id, Revision: r.Revision, Wave: r.Wave, Version: r.Version}
		if err := retryControl(ctx, func(ctx context.Context) error {
			_, err := s.control.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: r.DeploymentId, Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT, Fence: fence})
			if status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.NotFound {
				return nil // it started, ended or went meanwhile
			}
			return err
		}); err != nil {
			return fmt.Errorf("abort the queued rollout of %s: %w", r.DeploymentId, err)
		}
	}
	for _, h := range fleetNow.GetHalts() {
		m.mu.Lock()
		rec := (*haltRec)(nil)
		for _, r := range m.halts {
			if r.id == h.Id {
				rec = r
			}
		}
		if rec == nil { // made, its answer lost
			rec = &haltRec{id: h.Id, answered: never, lifted: never}
			m.halts = append(m.halts, rec)
		}
		m.mu.Unlock()
		if err := retryControl(ctx, func(ctx context.Context) error {
			err := f.lift(ctx, s.control, rec)
			if status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.NotFound {
				return nil // lifted by a try whose answer was lost
			}
			return err
		}); err != nil {
			return fmt.Errorf("lift halt %d: %w", h.Id, err)
		}
	}
	for _, w := range fleetNow.GetWindows() {
		if w.EndsAt != nil && w.EndsAt.AsTime().Before(fleetNow.GetNow().AsTime().Add(10*time.Second)) {
			continue
		}
		m.mu.Lock()
		m.windowEnds(w.Name, time.Now())
		m.mu.Unlock()
		if err := retryControl(ctx, func(ctx context.Context) error {
			_, err := s.control.DeleteFreezeWindow(ctx, &ctrlv1.DeleteFreezeWindowRequest{Name: w.Name})
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("delete window %s: %w", w.Name, err)
		}
		m.tally(func(s *FleetStats) { s.WindowDeletes++ })
	}
	for _, b := range fleetNow.GetBounds() {
		scope := scopeRec{workspace: b.Scope.GetWorkspaceId(), env: b.Scope.GetEnvironmentId(), region: b.Scope.GetRegion()}
		m.mu.Lock()
		m.boundEnds(scope, time.Now())
		m.mu.Unlock()
		if err := retryControl(ctx, func(ctx context.Context) error {
			_, err := s.control.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: b.Scope, Remove: true})
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("remove the bound of %s: %w", scope, err)
		}
		m.tally(func(s *FleetStats) { s.BoundRemoves++ })
	}
	return nil
}
