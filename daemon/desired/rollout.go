package desired

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/instance"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/validate"
)

// ErrRolloutInFlight: the deployment has a rollout in flight, and the
// action would start another or act on one that is not there.
var ErrRolloutInFlight = errors.New("rollout in flight")

// ErrNoRollout: the deployment has no rollout in flight to act on.
var ErrNoRollout = errors.New("no rollout in flight")

// A region's states in a rollout.
const (
	RegionWaiting     = "waiting"
	RegionProgressing = "progressing"
	RegionBaking      = "baking"
	RegionPassed      = "passed"
	RegionFailed      = "failed"
)

// RolloutActor is who the audit log and the revisions name for what a
// rollout does by itself.
const RolloutActor = "rollout"

type strategyKey struct{}

// WithStrategy makes the deploys, updates and rollbacks made with ctx roll
// out under s instead of their environment's strategy (checked with
// CheckStrategy first).
func WithStrategy(ctx context.Context, s jsontype.Strategy) context.Context {
	return context.WithValue(ctx, strategyKey{}, s)
}

// strategyFor is the strategy a change of the deployment rolls out under:
// the call's own, or its environment's.
func strategyFor(ctx context.Context, tx *ent.Tx, dep *ent.Deployment) (jsontype.Strategy, error) {
	if s, ok := ctx.Value(strategyKey{}).(jsontype.Strategy); ok {
		s, err := CheckStrategy(s)
		if err != nil {
			return s, err
		}
		return s, knownStrategyRegions(ctx, tx.Client(), "rollout", s)
	}
	return environmentStrategy(ctx, tx.Client(), dep.WorkspaceID, dep.EnvironmentID)
}

// noRolloutInFlight fails with ErrRolloutInFlight when the deployment has
// one. Checked under the deployment's row lock (revise); the unique
// in_flight column refuses a second one even where that lock does not
// reach (another Galera node).
func noRolloutInFlight(ctx context.Context, tx *ent.Tx, id string) error {
	r, err := tx.Rollout.Query().Where(rollout.InFlight(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State == rollout.StateQueued {
		return fmt.Errorf("deployment %q: %w: revision %d, queued (no wave started); abort it first, or break glass to start it (`rollout status %s`)",
			id, ErrRolloutInFlight, r.Revision, id)
	}
	return fmt.Errorf("deployment %q: %w: revision %d, %s at wave %d of %d; promote, resume or abort it first (`rollout status %s`)",
		id, ErrRolloutInFlight, r.Revision, r.State, r.Wave+1, len(r.Strategy.Waves), id)
}

// rollOut moves the deployment's regions to revision's spec to under the
// call's strategy: all at once for an immediate one, otherwise the first
// wave now and a Rollout row for the driver (daemon/rollout) to take on
// from. It runs in the transaction of the action that makes the revision,
// after its row lock; before is the newest change of the deployment
// before the action.
func (s *Store) rollOut(ctx context.Context, tx *ent.Tx, dep *ent.Deployment, revision int, to jsontype.Spec, before uint64) error {
	topologies, err := tx.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(dep.ID)).
		Order(ent.Asc(deploymenttopology.FieldRegion)).All(ctx)
	if err != nil {
		return err
	}
	strategy, err := strategyFor(ctx, tx, dep)
	if err != nil {
		return err
	}
	regions := make([]string, 0, len(topologies))
	for _, t := range topologies {
		regions = append(regions, t.Region)
	}
	waves, err := planWaves(strategy, dep.ID, regions)
	if err != nil {
		return err
	}
	if err := notFailed(ctx, tx, dep.ID, to.Hash); err != nil {
		return err
	}
	hold, err := s.firstWaveHold(ctx, tx, dep, waveRegions(waves, regions), len(waves) == 0)
	if err != nil {
		return err
	}
	if len(waves) == 0 {
		if hold.Held() {
			return immediateHeld(dep.ID, hold)
		}
		return promote(ctx, tx, dep.ID, regions, to, revision)
	}
	// Held, the rollout waits queued: no region gets the spec until the
	// driver starts it (daemon/rollout).
	if !hold.Held() {
		if err := promote(ctx, tx, dep.ID, waves[0].Regions, to, revision); err != nil {
			return err
		}
	}
	// What the regions ran: with no rollout in flight, every region runs
	// one spec (each rollout ends with all of them on its new spec or all
	// back on its old one).
	from, fromRevision := jsontype.Spec{}, 0
	if len(topologies) > 0 {
		from, fromRevision = topologySpec(topologies[0]), topologies[0].SpecRevision
	}
	strategy.Waves = waves
	return beginRollout(ctx, tx, dep.ID, revision, from, fromRevision, to, strategy, regions, before, hold.Held())
}

// waveRegions is the regions of each wave; an immediate change (no
// waves) is one wave of every region, as a halt of a region sees it.
func waveRegions(waves []jsontype.Wave, regions []string) [][]string {
	if len(waves) == 0 {
		return [][]string{regions}
	}
	out := make([][]string, 0, len(waves))
	for _, w := range waves {
		out = append(out, w.Regions)
	}
	return out
}

// immediateHeld is the refusal of an immediate change a fleet control
// holds: it has no rollout to wait in.
func immediateHeld(id string, hold fleet.Hold) error {
	return fmt.Errorf("deployment %q: %w: %s (an immediate change cannot wait: give it waves to queue it, or break glass)",
		id, ErrHeld, hold.Describe())
}

// beginRollout records a rollout whose first wave was just promoted, for
// the driver to take on from; or, queued, one whose first wave waits for
// the fleet's controls (nothing promoted).
func beginRollout(ctx context.Context, tx *ent.Tx, id string, revision int, from jsontype.Spec, fromRevision int,
	to jsontype.Spec, strategy jsontype.Strategy, regions []string, before uint64, queued bool) error {
	heads, err := changelog.ResourceHeads(ctx, tx, deploymentchange.ResourceTypeDeploymentTopology.String(), id, before)
	if err != nil {
		return err
	}
	now, err := store.Now(ctx, tx)
	if err != nil {
		return err
	}
	states := make(map[string]jsontype.RegionRollout, len(regions))
	for _, r := range regions {
		states[r] = jsontype.RegionRollout{State: RegionWaiting}
	}
	state := rollout.StateQueued
	if !queued {
		state = rollout.StateProgressing
		for _, r := range strategy.Waves[0].Regions {
			states[r] = jsontype.RegionRollout{State: RegionProgressing, PromotedAt: &now, Version: heads[r]}
		}
	}
	create := tx.Rollout.Create().SetDeploymentID(id).SetInFlight(id).SetState(state).
		SetRevision(revision).SetFromRevision(fromRevision).SetFromSpec(from).SetToSpec(to).
		SetStrategy(strategy).SetRegions(states).SetActor(validate.Clip(actorOf(ctx), 255))
	if reason := breakGlassOf(ctx); reason != "" {
		create.SetBreakGlassBy(validate.Clip(actorOf(ctx), 255)).SetBreakGlassReason(validate.Clip(reason, 1024))
	}
	err = create.Exec(ctx)
	if ent.IsConstraintError(err) { // in flight through another Galera node
		return rerun{fmt.Errorf("deployment %q: %w", id, ErrRolloutInFlight)}
	}
	return err
}

// promote gives regions of the deployment the spec.
func promote(ctx context.Context, tx *ent.Tx, id string, regions []string, spec jsontype.Spec, revision int) error {
	if len(regions) == 0 {
		return nil
	}
	return setSpec(tx.DeploymentTopology.Update().
		Where(deploymenttopology.DeploymentID(id), deploymenttopology.RegionIn(regions...)), spec, revision).Exec(ctx)
}

// topologySpec is the spec a topology row runs.
func topologySpec(t *ent.DeploymentTopology) jsontype.Spec {
	return jsontype.Spec{Image: t.Image, CPUMillicores: t.CPUMillicores, MemoryMiB: t.MemoryMib, Port: t.Port,
		Command: t.Command, Env: t.Env, Hash: t.SpecHash}
}

// RolloutStep is what the driver decided for a rollout it read at Version:
// the regions' new states and, at most one of, the next wave (Advance),
// a halt (Halt, with Reason), or neither (progress only).
type RolloutStep struct {
	ID      int
	Version int64
	Regions map[string]jsontype.RegionRollout
	Advance bool
	Halt    bool
	Reason  string
}

// StepRollout writes a step the driver decided, if the rollout is still at
// the version it was read at; ErrConcurrentChange otherwise (another
// replica, or an operator, moved it first: the step is dropped, and
// decided again from what is there now). Advancing past the last wave
// ends it succeeded; a halt rolls it back or holds it (halted), as its
// strategy's on_failure says.
func (s *Store) StepRollout(ctx context.Context, step RolloutStep) error {
	return s.stepRollout(ctx, step.ID, step.Version, func(tx *ent.Tx, r *ent.Rollout) error {
		// A copy: advance and rollBack write into it, and the caller's
		// map is the caller's (a rerun, or another step, reads it again).
		r.Regions = maps.Clone(step.Regions)
		switch {
		case step.Halt && r.Strategy.OnFailure == OnFailurePause:
			return save(ctx, tx, r, rollout.StateHalted, step.Reason)
		case step.Halt:
			return rollBack(ctx, tx, r, RolloutActor, step.Reason)
		case step.Advance:
			// The fleet's controls, read again under their lock: a halt
			// or a window the driver's read predates holds the wave.
			if hold, err := s.waveHold(ctx, tx, r, r.Wave+1); err != nil || hold.Held() {
				if err == nil {
					err = fmt.Errorf("rollout %d: wave %d %s: %w", r.ID, r.Wave+2, hold.Why, ErrConcurrentChange)
				}
				return err
			}
			return advance(ctx, tx, r, "")
		}
		return save(ctx, tx, r, r.State, r.Reason)
	})
}

// Operator actions on a deployment's rollout in flight.
const (
	RolloutPause   = "pause"
	RolloutResume  = "resume"
	RolloutPromote = "promote"
	RolloutAbort   = "abort"
	// RolloutBreakGlass takes the rollout through the fleet's holds
	// (halts, freeze windows, pacing), for the reason on the context
	// (WithBreakGlass): a queued one starts now, one a halt paused goes
	// on, and no hold stops its later waves.
	RolloutBreakGlass = "break-glass"
)

// ControlRollout is an operator's action on the deployment's rollout in
// flight: pause holds it where it is; resume lets it go on (the current
// wave's regions not passed, failed ones included, get a new deadline and
// bake again); promote passes the current
// wave now, skipping what is left of its bake; abort rolls back every
// region it promoted. It returns the rollout as the action left it.
//
// A fence (at most one) is what the operator confirmed the action on:
// when the rollout in flight is no longer that one, at that wave and
// version, nothing is done and the error (ErrRolloutMoved) says what
// changed. Without one the action is on whatever is in flight.
func (s *Store) ControlRollout(ctx context.Context, deploymentID, action string, fence ...RolloutFence) (*ent.Rollout, error) {
	if err := checkID("deployment_id", deploymentID); err != nil {
		return nil, err
	}
	if !slices.Contains([]string{RolloutPause, RolloutResume, RolloutPromote, RolloutAbort, RolloutBreakGlass}, action) {
		return nil, fmt.Errorf("action: %w: want pause, resume, promote, abort or break-glass, got %q", ErrInvalid, action)
	}
	if action == RolloutBreakGlass {
		if err := checkReason("reason", breakGlassOf(ctx)); err != nil {
			return nil, err
		}
	}
	var confirmed RolloutFence
	switch len(fence) {
	case 0:
	case 1:
		confirmed = fence[0]
	default:
		return nil, fmt.Errorf("fence: %w: at most one, got %d", ErrInvalid, len(fence))
	}
	if err := confirmed.checkFields(); err != nil {
		return nil, err
	}
	var out *ent.Rollout
	err := store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if _, err := tx.Deployment.Query().Where(deployment.ID(deploymentID)).ForUpdate().OnlyID(ctx); err != nil {
			if ent.IsNotFound(err) {
				return fmt.Errorf("deployment %q: %w", deploymentID, ErrNotFound)
			}
			return err
		}
		r, err := tx.Rollout.Query().Where(rollout.InFlight(deploymentID)).Only(ctx)
		if ent.IsNotFound(err) {
			if confirmed.given() {
				return confirmed.check(ctx, tx, deploymentID, nil)
			}
			return fmt.Errorf("deployment %q: %w", deploymentID, ErrNoRollout)
		}
		if err != nil {
			return err
		}
		// What the operator confirmed, checked under the deployment's
		// lock, which every step takes too: no step lands between this
		// read and the action's write (and on Galera, one that commits on
		// another node fails this transaction's certification, and the
		// rerun reads it).
		if err := confirmed.check(ctx, tx, deploymentID, r); err != nil {
			return err
		}
		actor := actorOf(ctx)
		queued := r.State == rollout.StateQueued
		switch action {
		case RolloutPause:
			if r.State != rollout.StateProgressing {
				return fmt.Errorf("deployment %q: %w: its rollout is %s, not progressing", deploymentID, ErrConflict, r.State)
			}
			err = save(ctx, tx, r, rollout.StatePaused, "paused by "+actor)
		case RolloutResume:
			switch {
			case r.State == rollout.StateProgressing:
				return fmt.Errorf("deployment %q: %w: its rollout is progressing already", deploymentID, ErrConflict)
			case queued:
				return fmt.Errorf("deployment %q: %w: its rollout is queued, not paused: %s", deploymentID, ErrHeld, s.queuedWhy(ctx, tx, r))
			case r.HaltID != nil && r.BreakGlassBy == "":
				return fmt.Errorf("deployment %q: %w: %s: lift it (fleet resume %d), or break glass with a reason", deploymentID, ErrHeld, r.Reason, *r.HaltID)
			}
			// The wave's clock starts again: its regions not passed yet
			// (failed ones included: another chance) get a new deadline
			// and bake from their next healthy look. A deadline that ran
			// out while paused would fail them at once.
			err = resume(ctx, tx, r)
		case RolloutPromote:
			if queued {
				return fmt.Errorf("deployment %q: %w: its rollout is queued, no wave started: %s; break glass with a reason to start it now", deploymentID, ErrHeld, s.queuedWhy(ctx, tx, r))
			}
			hold, herr := s.waveHold(ctx, tx, r, r.Wave+1)
			if herr != nil {
				return herr
			}
			if hold.Held() {
				return fmt.Errorf("deployment %q: %w: wave %d is %s", deploymentID, ErrHeld, r.Wave+2, hold.Describe())
			}
			err = advance(ctx, tx, r, actor)
		case RolloutAbort:
			err = rollBack(ctx, tx, r, actor, "aborted by "+actor)
		case RolloutBreakGlass:
			err = breakGlass(ctx, tx, r, actor)
		}
		if err != nil {
			return err
		}
		out, err = tx.Rollout.Get(ctx, r.ID)
		return err
	})
	return out, err
}

// resume starts the current wave's clock again: its regions not passed
// yet (failed ones included: another chance) get a new deadline and bake
// from their next healthy look, and count their pods' restarts from now.
// A deadline that ran out while paused would fail them at once, and a
// restart from before would fail them again.
func resume(ctx context.Context, tx *ent.Tx, r *ent.Rollout) error {
	return resumeAll(ctx, tx, []*ent.Rollout{r})
}

// resumeAll resumes rs (see resume) with one read of the clock and one of
// the restarted instances for all of them: a halt's lift resumes every
// rollout it paused in one transaction.
func resumeAll(ctx context.Context, tx *ent.Tx, rs []*ent.Rollout) error {
	if len(rs) == 0 {
		return nil
	}
	now, err := store.Now(ctx, tx)
	if err != nil {
		return err
	}
	type wavePod struct{ deployment, region, hash string }
	var deployments, hashes []string
	for _, r := range rs {
		deployments, hashes = append(deployments, r.DeploymentID), append(hashes, r.ToSpec.Hash)
	}
	restarted, err := tx.Instance.Query().
		Where(instance.DeploymentIDIn(deployments...), instance.SpecHashIn(hashes...), instance.RestartsGT(0)).
		All(ctx)
	if err != nil {
		return err
	}
	baselines := map[wavePod]map[string]int{}
	for _, in := range restarted {
		k := wavePod{in.DeploymentID, in.Region, in.SpecHash}
		if baselines[k] == nil {
			baselines[k] = map[string]int{}
		}
		baselines[k][in.PodName] = int(in.Restarts)
	}
	for _, r := range rs {
		for _, region := range r.Strategy.Waves[r.Wave].Regions {
			st := r.Regions[region]
			if st.State == RegionPassed {
				continue
			}
			baseline := baselines[wavePod{r.DeploymentID, region, r.ToSpec.Hash}]
			if baseline == nil {
				baseline = map[string]int{}
			}
			r.Regions[region] = jsontype.RegionRollout{State: RegionProgressing, PromotedAt: &now, Version: st.Version, Baseline: baseline}
		}
		if err := saveAt(ctx, tx, r, rollout.StateProgressing, "", now); err != nil {
			return err
		}
	}
	return nil
}

// stepRollout runs change on rollout id in one transaction, if it is still
// in flight at version.
func (s *Store) stepRollout(ctx context.Context, id int, version int64, change func(tx *ent.Tx, r *ent.Rollout) error) error {
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		r, err := tx.Rollout.Get(ctx, id)
		if ent.IsNotFound(err) { // its deployment was deleted
			return fmt.Errorf("rollout %d: %w", id, ErrConcurrentChange)
		}
		if err != nil {
			return err
		}
		if r.Version != version || r.InFlight == nil {
			return fmt.Errorf("rollout %d: at version %d, not %d: %w", id, r.Version, version, ErrConcurrentChange)
		}
		// The deployment's lock, which every revising action takes
		// first: a step and an operator's action on the deployment run
		// one after the other.
		if _, err := tx.Deployment.Query().Where(deployment.ID(r.DeploymentID)).ForUpdate().IDs(ctx); err != nil {
			return err
		}
		return change(tx, r)
	})
}

// save writes the rollout's regions, state and reason, if it is still at
// the version read: the write every step ends with. A rollout that ends
// leaves in_flight.
func save(ctx context.Context, tx *ent.Tx, r *ent.Rollout, state rollout.State, reason string) error {
	now, err := store.Now(ctx, tx)
	if err != nil {
		return err
	}
	return saveAt(ctx, tx, r, state, reason, now)
}

// saveAt is save stamped now: for a step that read the database's clock
// already (a promotion's times), so that it is read once.
func saveAt(ctx context.Context, tx *ent.Tx, r *ent.Rollout, state rollout.State, reason string, now time.Time) error {
	u := tx.Rollout.Update().Where(rollout.ID(r.ID), rollout.Version(r.Version)).
		SetRegions(r.Regions).SetState(state).SetWave(r.Wave).SetReason(validate.Clip(reason, 1024)).
		AddVersion(1).SetUpdatedAt(now)
	if state == rollout.StateSucceeded || state == rollout.StateRolledBack {
		u.ClearInFlight().SetFinishedAt(now)
	}
	if state != rollout.StatePaused {
		u.ClearHaltID() // a halt's mark lasts while it holds the rollout paused
	}
	n, err := u.Save(ctx)
	if err == nil && n == 0 {
		err = fmt.Errorf("rollout %d: %w", r.ID, ErrConcurrentChange)
	}
	return err
}

// advance passes the current wave (its regions not failed count as
// passed) and promotes the next, or ends the rollout succeeded after the
// last. by names an operator who promoted by hand ("" for the driver).
func advance(ctx context.Context, tx *ent.Tx, r *ent.Rollout, by string) error {
	wave := r.Strategy.Waves[r.Wave]
	for _, region := range wave.Regions {
		if st := r.Regions[region]; st.State != RegionFailed {
			st.State = RegionPassed
			if by != "" {
				st.Why = "promoted by " + by
			}
			r.Regions[region] = st
		}
	}
	if r.Wave+1 == len(r.Strategy.Waves) {
		// The spec has proven itself: a mark of its failing before goes.
		if err := clearFailed(ctx, tx, r); err != nil {
			return err
		}
		return save(ctx, tx, r, rollout.StateSucceeded, "")
	}
	r.Wave++
	next := r.Strategy.Waves[r.Wave].Regions
	before, err := lastChange(ctx, tx, r.DeploymentID)
	if err != nil {
		return err
	}
	// Only the regions that still run the deployment: one deleted since
	// (its topology gone) is not brought back.
	if err := promote(ctx, tx, r.DeploymentID, next, r.ToSpec, r.Revision); err != nil {
		return err
	}
	heads, err := changelog.ResourceHeads(ctx, tx, deploymentchange.ResourceTypeDeploymentTopology.String(), r.DeploymentID, before)
	if err != nil {
		return err
	}
	now, err := store.Now(ctx, tx)
	if err != nil {
		return err
	}
	for _, region := range next {
		r.Regions[region] = jsontype.RegionRollout{State: RegionProgressing, PromotedAt: &now, Version: heads[region]}
	}
	return saveAt(ctx, tx, r, rollout.StateProgressing, "", now)
}

// rollBack returns every region the rollout promoted to the spec before
// it, makes that the deployment's spec again (as a revision of action
// rollback, by actor), audits it naming the reason, and ends the rollout
// rolled back. Regions it never reached keep the old spec and get no
// change.
func rollBack(ctx context.Context, tx *ent.Tx, r *ent.Rollout, actor, reason string) error {
	var reached []string
	for _, region := range slices.Sorted(maps.Keys(r.Regions)) {
		if r.Regions[region].State != RegionWaiting {
			reached = append(reached, region)
		}
	}
	before, err := lastChange(ctx, tx, r.DeploymentID)
	if err != nil {
		return err
	}
	if err := promote(ctx, tx, r.DeploymentID, reached, r.FromSpec, r.FromRevision); err != nil {
		return err
	}
	// A new deployment's rollout rolls back to nothing: its regions run
	// nothing, and its own row keeps the spec that failed, for the record.
	if r.FromSpec.Hash != "" {
		f := r.FromSpec
		err := tx.Deployment.UpdateOneID(r.DeploymentID).SetImage(f.Image).SetCPUMillicores(f.CPUMillicores).
			SetMemoryMib(f.MemoryMiB).SetPort(f.Port).SetCommand(f.Command).SetEnv(f.Env).Exec(ctx)
		if err != nil {
			return err
		}
	}
	if _, err := writeRevision(WithActor(ctx, actor), tx, r.DeploymentID, ActionRollback, before); err != nil {
		return err
	}
	// A spec a gate failed stays failed (FailedSpec): the rollout's own
	// rollback, or an operator's abort of a rollout a failed wave halted.
	if actor == RolloutActor || r.State == rollout.StateHalted {
		evidence := reason
		if actor != RolloutActor {
			evidence = r.Reason
		}
		if err := markFailed(ctx, tx, r, evidence); err != nil {
			return err
		}
	}
	// An operator's abort is audited as the operator's action; the
	// rollout's own rollback is audited here, with the evidence.
	if actor == RolloutActor {
		err = tx.AuditLog.Create().SetActor(RolloutActor).SetAction("rollout.rollback").SetTarget(r.DeploymentID).
			SetDetail(validate.Clip(fmt.Sprintf("revision %d -> %d (regions %s): %s", r.Revision, r.FromRevision, strings.Join(reached, ","), reason), 4096)).
			Exec(ctx)
		if err != nil {
			return err
		}
	}
	return save(ctx, tx, r, rollout.StateRolledBack, reason)
}

// InFlight reads the rollouts in flight (progressing, paused or halted),
// for the driver and the views.
func (s *Store) InFlight(ctx context.Context) ([]*ent.Rollout, error) {
	return s.client.Rollout.Query().Where(rollout.InFlightNotNil()).All(ctx)
}

// waveHold is what holds wave i of r from starting now: a halt or a
// freeze window (the zero Hold for none, for a rollout taken through on
// purpose, and past the last wave). It locks the fleet's controls for tx
// when nothing holds the wave (held).
func (s *Store) waveHold(ctx context.Context, tx *ent.Tx, r *ent.Rollout, i int) (fleet.Hold, error) {
	if i >= len(r.Strategy.Waves) || r.BreakGlassBy != "" {
		return fleet.Hold{}, nil
	}
	dep, err := tx.Deployment.Query().Where(deployment.ID(r.DeploymentID)).
		Select(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID).Only(ctx)
	if err != nil {
		return fleet.Hold{}, err
	}
	r.Edges.Deployment = dep
	return s.held(ctx, tx, func(state *fleet.State, now time.Time) fleet.Hold {
		return state.Plan(now).Wave(fleet.RolloutOf(r), i)
	})
}

// StartRollout starts a queued rollout's first wave, if it is still
// queued at version and the fleet's controls let it start now (read again
// under their lock); ErrConcurrentChange otherwise, and nothing is done.
func (s *Store) StartRollout(ctx context.Context, id int, version int64) error {
	return s.stepRollout(ctx, id, version, func(tx *ent.Tx, r *ent.Rollout) error {
		if r.State != rollout.StateQueued {
			return fmt.Errorf("rollout %d: %s, not queued: %w", id, r.State, ErrConcurrentChange)
		}
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		state, at, err := s.readLocked(ctx, tx)
		if err != nil {
			return err
		}
		if p := state.Plan(at); !p.MayStart(id) {
			return fmt.Errorf("rollout %d: %s: %w", id, p.Queued(id).Why, ErrConcurrentChange)
		}
		// The promotion's time is the database's, not the window clock's.
		return startFirstWave(ctx, tx, r, at.Add(-s.windowOffset))
	})
}

// startFirstWave promotes a queued rollout's first wave (after the
// fleet's lock, by StartRollout or a break-glass).
func startFirstWave(ctx context.Context, tx *ent.Tx, r *ent.Rollout, now time.Time) error {
	first := r.Strategy.Waves[0].Regions
	before, err := lastChange(ctx, tx, r.DeploymentID)
	if err != nil {
		return err
	}
	if err := promote(ctx, tx, r.DeploymentID, first, r.ToSpec, r.Revision); err != nil {
		return err
	}
	heads, err := changelog.ResourceHeads(ctx, tx, deploymentchange.ResourceTypeDeploymentTopology.String(), r.DeploymentID, before)
	if err != nil {
		return err
	}
	r.Regions = maps.Clone(r.Regions)
	for _, region := range first {
		r.Regions[region] = jsontype.RegionRollout{State: RegionProgressing, PromotedAt: &now, Version: heads[region]}
	}
	return saveAt(ctx, tx, r, rollout.StateProgressing, "", now)
}

// queuedWhy is what holds a queued rollout now, for a refusal.
func (s *Store) queuedWhy(ctx context.Context, tx *ent.Tx, r *ent.Rollout) string {
	state, err := fleet.Read(ctx, tx.Client())
	if err != nil {
		return "waiting for the fleet's controls"
	}
	now, err := s.windowNow(ctx, tx)
	if err != nil {
		return "waiting for the fleet's controls"
	}
	if h := state.Plan(now).Queued(r.ID); h.Held() {
		return h.Why
	}
	return "it starts at the driver's next look"
}

// breakGlass takes r through the fleet's holds: it records who and why
// on the rollout, starts a queued one's first wave now, and lets one a
// halt paused go on.
func breakGlass(ctx context.Context, tx *ent.Tx, r *ent.Rollout, actor string) error {
	if r.BreakGlassBy != "" {
		return fmt.Errorf("deployment %q: %w: its rollout was taken through already, by %s: %s", r.DeploymentID, ErrConflict, r.BreakGlassBy, r.BreakGlassReason)
	}
	if err := fleet.Lock(ctx, tx); err != nil {
		return err
	}
	n, err := tx.Rollout.Update().Where(rollout.ID(r.ID), rollout.Version(r.Version)).
		SetBreakGlassBy(validate.Clip(actor, 255)).SetBreakGlassReason(validate.Clip(breakGlassOf(ctx), 1024)).Save(ctx)
	if err == nil && n == 0 {
		err = fmt.Errorf("rollout %d: %w", r.ID, ErrConcurrentChange)
	}
	if err != nil {
		return err
	}
	r.BreakGlassBy = actor
	switch {
	case r.State == rollout.StateQueued:
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		return startFirstWave(ctx, tx, r, now)
	case r.State == rollout.StatePaused && r.HaltID != nil:
		return resume(ctx, tx, r)
	}
	return nil
}
