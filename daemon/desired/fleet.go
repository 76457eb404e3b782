package desired

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/failedspec"
	"github.com/deploysync/deploysync/ent/fleethalt"
	"github.com/deploysync/deploysync/ent/freezewindow"
	"github.com/deploysync/deploysync/ent/pacingbound"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/validate"
)

var (
	// ErrHeld: a fleet control (a halt, a freeze window) holds what the
	// action would start, and the action cannot wait for it (an
	// immediate change, a promote, a resume); nothing was done. The
	// error says what holds it and how past it.
	ErrHeld = errors.New("held by the fleet's controls")
	// ErrFailedSpec: the spec the action would roll out is one a rollout
	// rolled back for a failed gate; nothing was done. The error names
	// that rollout and its evidence.
	ErrFailedSpec = errors.New("failed before")
)

// MaxFleetReason bounds the reason given for a halt, a break-glass or a
// retry of a failed spec.
const MaxFleetReason = 1024

type breakGlassKey struct{}

type retryFailedKey struct{}

// WithBreakGlass makes the deploys, updates and rollbacks made with ctx
// go through the fleet's holds (halts, freeze windows, pacing): the
// emergency path, audited with the reason and shown on the rollout.
func WithBreakGlass(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, breakGlassKey{}, reason)
}

// WithRetryFailed lets the updates and rollbacks made with ctx roll out a
// spec a gate failed before, on purpose, for the reason given.
func WithRetryFailed(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, retryFailedKey{}, reason)
}

func breakGlassOf(ctx context.Context) string {
	reason, _ := ctx.Value(breakGlassKey{}).(string)
	return reason
}

func retryFailedOf(ctx context.Context) string {
	reason, _ := ctx.Value(retryFailedKey{}).(string)
	return reason
}

// checkReason checks a reason the fleet's actions require.
func checkReason(field, reason string) error {
	switch {
	case reason == "":
		return fmt.Errorf("%s: %w: give a reason (it is audited, and shown to the others)", field, ErrInvalid)
	case len(reason) > MaxFleetReason:
		return fmt.Errorf("%s: %w: at most %d bytes, got %d", field, ErrInvalid, MaxFleetReason, len(reason))
	}
	return nil
}

// CheckFleetContext refuses a break-glass or retry reason on ctx that
// breaks the reason's rules (empty ones are not on ctx).
func CheckFleetContext(ctx context.Context) error {
	if v, ok := ctx.Value(breakGlassKey{}).(string); ok {
		if err := checkReason("break_glass_reason", v); err != nil {
			return err
		}
	}
	if v, ok := ctx.Value(retryFailedKey{}).(string); ok {
		if err := checkReason("retry_failed_reason", v); err != nil {
			return err
		}
	}
	return nil
}

// firstWaveHold is what holds the first wave of a rollout about to be
// made for the deployment (the zero Hold when it may start now). It locks
// the fleet's controls for tx (fleet.Lock), so that a halt or window
// committed meanwhile, or another start, is seen; a break-glass call is
// held by nothing. An immediate change's waves are one, of every region.
func (s *Store) firstWaveHold(ctx context.Context, tx *ent.Tx, dep *ent.Deployment, waves [][]string, immediate bool) (fleet.Hold, error) {
	candidate := fleet.Rollout{ID: fleet.Candidate, DeploymentID: dep.ID, WorkspaceID: dep.WorkspaceID,
		EnvironmentID: dep.EnvironmentID, Queued: true, Waves: waves}
	judge := func(state *fleet.State, now time.Time) fleet.Hold {
		if immediate { // one wave of every region, not paced: it has no rollout in flight
			return state.Plan(now).Wave(candidate, 0)
		}
		return state.With(candidate).Plan(now).Queued(fleet.Candidate)
	}
	if breakGlassOf(ctx) != "" {
		return fleet.Hold{}, fleet.Lock(ctx, tx)
	}
	return s.held(ctx, tx, judge)
}

// notFailed refuses rolling the deployment out to spec hash when a
// rollout rolled that spec back for a failed gate, unless the call
// retries it on purpose (WithRetryFailed), which is audited.
func notFailed(ctx context.Context, tx *ent.Tx, id, hash string) error {
	failed, err := tx.FailedSpec.Query().Where(failedspec.DeploymentID(id), failedspec.SpecHash(hash)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if reason := retryFailedOf(ctx); reason != "" {
		return tx.AuditLog.Create().SetActor(validate.Clip(actorOf(ctx), 255)).SetAction("rollout.retry_failed").SetTarget(id).
			SetDetail(validate.Clip(fmt.Sprintf("spec of revision %d, rolled back by rollout %d (%s): %s", failed.Revision, failed.RolloutID, failed.Reason, reason), 4096)).
			Exec(ctx)
	}
	return fmt.Errorf("deployment %q: %w: this spec is revision %d's, which rollout %d rolled back: %s; to ship it again on purpose, retry it with a reason (--retry-failed)",
		id, ErrFailedSpec, failed.Revision, failed.RolloutID, failed.Reason)
}

// markFailed records that the rollout's spec failed its gate, with the
// evidence.
func markFailed(ctx context.Context, tx *ent.Tx, r *ent.Rollout, reason string) error {
	return tx.FailedSpec.Create().SetDeploymentID(r.DeploymentID).SetSpecHash(r.ToSpec.Hash).
		SetRevision(r.Revision).SetRolloutID(r.ID).SetReason(validate.Clip(reason, 1024)).
		OnConflict().UpdateRevision().UpdateRolloutID().UpdateReason().UpdateCreatedAt().Exec(ctx)
}

// clearFailed removes the mark of a spec whose rollout succeeded: it has
// proven itself since.
func clearFailed(ctx context.Context, tx *ent.Tx, r *ent.Rollout) error {
	_, err := tx.FailedSpec.Delete().Where(failedspec.DeploymentID(r.DeploymentID), failedspec.SpecHash(r.ToSpec.Hash)).Exec(ctx)
	return err
}

// Halt halts every rollout in flight in scope: those progressing are
// paused (their halt_id names it), and no rollout in scope starts a wave
// until it is lifted (new ones wait, queued). It returns the halt and how
// many rollouts it paused.
func (s *Store) Halt(ctx context.Context, scope fleet.Scope, reason string) (*ent.FleetHalt, int, error) {
	if err := checkReason("reason", reason); err != nil {
		return nil, 0, err
	}
	if err := s.checkScope(ctx, scope); err != nil {
		return nil, 0, err
	}
	var out *ent.FleetHalt
	paused := 0
	err := store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		paused = 0
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		h, err := tx.FleetHalt.Create().SetWorkspaceID(scope.WorkspaceID).SetEnvironmentID(scope.EnvironmentID).
			SetRegion(scope.Region).SetReason(reason).SetActor(validate.Clip(actorOf(ctx), 255)).SetCreatedAt(now).Save(ctx)
		if err != nil {
			return err
		}
		halt := fleet.HaltOf(h)
		// The rollouts in flight, read with a locking read: one that
		// committed a step meanwhile is read as it is now, and the
		// version this writes is the one after it.
		rollouts, err := tx.Rollout.Query().Where(rollout.InFlightNotNil(), rollout.StateEQ(rollout.StateProgressing)).
			WithDeployment(fleet.Environments).ForUpdate().All(ctx)
		if err != nil {
			return err
		}
		var ids []int
		for _, r := range rollouts {
			if fr := fleet.RolloutOf(r); !fr.BreakGlass && halt.Pauses(fr) {
				ids = append(ids, r.ID)
			}
		}
		// One statement for all: their rows are this transaction's
		// (locked above), so each is at the version read.
		why := fmt.Sprintf("paused by halt #%d (%s: %s)", h.ID, h.Actor, reason)
		if len(ids) > 0 {
			if paused, err = tx.Rollout.Update().Where(rollout.IDIn(ids...)).SetState(rollout.StatePaused).SetHaltID(h.ID).
				SetReason(validate.Clip(why, 1024)).AddVersion(1).SetUpdatedAt(now).Save(ctx); err != nil {
				return err
			}
		}
		out, err = tx.FleetHalt.UpdateOneID(h.ID).SetPaused(paused).Save(ctx)
		return err
	})
	if err != nil {
		return nil, 0, invalidField(err)
	}
	return out, paused, nil
}

// pauseFor pauses a progressing rollout for a halt.
func pauseFor(ctx context.Context, tx *ent.Tx, r *ent.Rollout, haltID int, why string, now time.Time) error {
	n, err := tx.Rollout.Update().Where(rollout.ID(r.ID), rollout.Version(r.Version)).
		SetState(rollout.StatePaused).SetHaltID(haltID).SetReason(validate.Clip(why, 1024)).
		AddVersion(1).SetUpdatedAt(now).Save(ctx)
	if err == nil && n == 0 {
		err = fmt.Errorf("rollout %d: %w", r.ID, ErrConcurrentChange)
	}
	return err
}

// Resume lifts the halt: the rollouts it paused go on (each wave's clock
// starting again, as an operator's resume does), unless another halt
// that stands holds them, which then names them; nothing an operator
// paused is touched. It returns how many went on and how many another
// halt still holds.
func (s *Store) Resume(ctx context.Context, haltID int) (resumed, held int, err error) {
	if haltID <= 0 {
		return 0, 0, fmt.Errorf("halt_id: %w: a halt's number (fleet status lists them), got %d", ErrInvalid, haltID)
	}
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		resumed, held = 0, 0
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		h, err := tx.FleetHalt.Query().Where(fleethalt.ID(haltID)).ForUpdate().Only(ctx)
		if ent.IsNotFound(err) {
			return fmt.Errorf("halt %d: %w", haltID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if h.LiftedAt != nil {
			return fmt.Errorf("halt %d: %w: lifted already, by %s at %s", haltID, ErrConflict, h.LiftedBy, h.LiftedAt.UTC().Format(time.RFC3339))
		}
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		if err := tx.FleetHalt.UpdateOneID(haltID).SetLiftedAt(now).SetLiftedBy(validate.Clip(actorOf(ctx), 255)).Exec(ctx); err != nil {
			return err
		}
		others, err := tx.FleetHalt.Query().Where(fleethalt.LiftedAtIsNil()).Order(ent.Asc(fleethalt.FieldID)).ForShare(fleet.ShareMode).All(ctx)
		if err != nil {
			return err
		}
		paused, err := tx.Rollout.Query().Where(rollout.HaltID(haltID), rollout.StateEQ(rollout.StatePaused), rollout.InFlightNotNil()).
			WithDeployment(fleet.Environments).ForUpdate().All(ctx)
		if err != nil {
			return err
		}
		var goOn []*ent.Rollout
	next:
		for _, r := range paused {
			fr := fleet.RolloutOf(r)
			for _, o := range others {
				if other := fleet.HaltOf(o); other.Pauses(fr) {
					if err := pauseFor(ctx, tx, r, o.ID, fmt.Sprintf("paused by halt #%d (%s: %s)", o.ID, o.Actor, o.Reason), now); err != nil {
						return err
					}
					held++
					continue next
				}
			}
			goOn = append(goOn, r)
		}
		resumed = len(goOn)
		return resumeAll(ctx, tx, goOn)
	})
	return resumed, held, invalidField(err)
}

// checkScope refuses a scope of a region no one registered, or half an
// environment.
func (s *Store) checkScope(ctx context.Context, scope fleet.Scope) error {
	switch {
	case scope.Region != "" && (scope.WorkspaceID != "" || scope.EnvironmentID != ""):
		return fmt.Errorf("region: %w: a scope is a region or an environment, not both", ErrInvalid)
	case scope.Region != "":
		if err := validate.Region(scope.Region); err != nil {
			return fmt.Errorf("region: %w: %v", ErrInvalid, err)
		}
		return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
			if err := knownRegions(ctx, tx, scope.Region); err != nil {
				return fmt.Errorf("region: %w", err)
			}
			return nil
		})
	case scope.WorkspaceID != "" || scope.EnvironmentID != "":
		if scope.WorkspaceID == "" || scope.EnvironmentID == "" {
			return fmt.Errorf("environment_id: %w: an environment is a workspace_id and an environment_id, both given", ErrInvalid)
		}
		return s.checkPair(scope.WorkspaceID, scope.EnvironmentID)
	}
	return nil
}

// SetFreezeWindow creates or replaces the freeze window of w's name, in
// its environment (or all, when it names none). Rollouts in flight in its
// scope start no wave while it is closed.
func (s *Store) SetFreezeWindow(ctx context.Context, w fleet.Window, timeZone, reason string) (*ent.FreezeWindow, error) {
	parsed, err := fleet.ParseWindow(w, timeZone)
	if err != nil {
		return nil, invalidWindow{err}
	}
	if err := s.checkScope(ctx, fleet.Scope{WorkspaceID: w.WorkspaceID, EnvironmentID: w.EnvironmentID}); err != nil {
		return nil, err
	}
	if len(reason) > MaxFleetReason {
		return nil, fmt.Errorf("reason: %w: at most %d bytes, got %d", ErrInvalid, MaxFleetReason, len(reason))
	}
	var out *ent.FreezeWindow
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		create := tx.FreezeWindow.Create().SetName(parsed.Name).SetWorkspaceID(w.WorkspaceID).SetEnvironmentID(w.EnvironmentID).
			SetSchedule(w.Schedule).SetTimeZone(parsed.Location.String()).SetDurationSeconds(int64(w.Duration / time.Second)).
			SetReason(reason).SetActor(validate.Clip(actorOf(ctx), 255))
		if !w.StartsAt.IsZero() {
			create.SetStartsAt(w.StartsAt.UTC()).SetEndsAt(w.EndsAt.UTC())
		}
		id, err := create.OnConflict().UpdateNewValues().ID(ctx)
		if err != nil {
			return err
		}
		if w.StartsAt.IsZero() { // a recurring window replacing a one-off one
			if err := tx.FreezeWindow.UpdateOneID(id).ClearStartsAt().ClearEndsAt().Exec(ctx); err != nil {
				return err
			}
		}
		out, err = tx.FreezeWindow.Get(ctx, id)
		return err
	})
	return out, invalidField(err)
}

// DeleteFreezeWindow removes the freeze window of that name.
func (s *Store) DeleteFreezeWindow(ctx context.Context, name string) error {
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		n, err := tx.FreezeWindow.Delete().Where(freezewindow.Name(name)).Exec(ctx)
		if err == nil && n == 0 {
			err = fmt.Errorf("freeze window %q: %w", name, ErrNotFound)
		}
		return err
	})
}

// SetPacingBound bounds the rollouts in flight at once in an environment
// (max started), or the first waves in progress in a region (max
// canaries); max 0 removes the bound. Rollouts beyond it wait, queued.
func (s *Store) SetPacingBound(ctx context.Context, scope fleet.Scope, max int, remove bool) error {
	if scope == (fleet.Scope{}) {
		return fmt.Errorf("environment_id: %w: a pacing bound is an environment's or a region's", ErrInvalid)
	}
	if !remove && max < 1 {
		return fmt.Errorf("max: %w: at least 1 (to remove the bound, say so), got %d", ErrInvalid, max)
	}
	if max > 10_000 {
		return fmt.Errorf("max: %w: at most 10000, got %d", ErrInvalid, max)
	}
	if err := s.checkScope(ctx, scope); err != nil {
		return err
	}
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := fleet.Lock(ctx, tx); err != nil {
			return err
		}
		where := tx.PacingBound.Delete().Where(pacingbound.WorkspaceID(scope.WorkspaceID),
			pacingbound.EnvironmentID(scope.EnvironmentID), pacingbound.Region(scope.Region))
		if remove {
			n, err := where.Exec(ctx)
			if err == nil && n == 0 {
				err = fmt.Errorf("pacing bound of %s: %w", scope, ErrNotFound)
			}
			return err
		}
		return tx.PacingBound.Create().SetWorkspaceID(scope.WorkspaceID).SetEnvironmentID(scope.EnvironmentID).
			SetRegion(scope.Region).SetMax(max).SetActor(validate.Clip(actorOf(ctx), 255)).
			OnConflict().UpdateMax().UpdateActor().UpdateUpdatedAt().Exec(ctx)
	})
}

// invalidWindow is a window fleet.ParseWindow refused: invalid input, as
// ErrInvalid is, with the parser's words.
type invalidWindow struct{ error }

func (e invalidWindow) Unwrap() error { return e.error }

func (invalidWindow) Is(target error) bool { return target == ErrInvalid }

// windowNow is the time the fleet's controls are judged at: the
// database's clock, moved by the window clock's offset (WithWindowClock).
func (s *Store) windowNow(ctx context.Context, q store.Querier) (time.Time, error) {
	now, err := store.Now(ctx, q)
	return now.Add(s.windowOffset), err
}

// held is what judge says holds a wave start in tx. A hold seen on a
// plain read is answered without the fleet's lock: a refusal (an
// immediate change, a promote) or a rollout made queued takes nothing
// others share, and a hold lifted meanwhile only delays a start to the
// driver's next look. A start it lets through takes the lock and is
// judged again on locking reads, which a halt or window committed
// meanwhile cannot slip past.
func (s *Store) held(ctx context.Context, tx *ent.Tx, judge func(*fleet.State, time.Time) fleet.Hold) (fleet.Hold, error) {
	state, err := fleet.Read(ctx, tx.Client())
	if err != nil {
		return fleet.Hold{}, err
	}
	now, err := s.windowNow(ctx, tx)
	if err != nil {
		return fleet.Hold{}, err
	}
	if hold := judge(state, now); hold.Held() {
		return hold, nil
	}
	if err := fleet.Lock(ctx, tx); err != nil {
		return fleet.Hold{}, err
	}
	if state, now, err = s.readLocked(ctx, tx); err != nil {
		return fleet.Hold{}, err
	}
	return judge(state, now), nil
}

// readLocked reads the fleet's state in tx, which took fleet.Lock, and
// the time to judge it at (windowNow).
func (s *Store) readLocked(ctx context.Context, tx *ent.Tx) (*fleet.State, time.Time, error) {
	state, err := fleet.ReadLocked(ctx, tx)
	if err != nil {
		return nil, time.Time{}, err
	}
	now, err := s.windowNow(ctx, tx)
	return state, now, err
}
