package fleet

import (
	"context"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/fleethalt"
	"github.com/deploysync/deploysync/ent/rollout"
)

// ShareMode is the locking read of MariaDB (and MySQL before 8), which
// does not know MySQL 8's FOR SHARE.
var ShareMode = sql.WithLockClause("LOCK IN SHARE MODE")

// Lock makes tx the one writer of the fleet's controls and wave starts
// until it ends: it increments fleet_control's generation (making the row
// the first time). Take it before the reads it guards (ReadLocked).
func Lock(ctx context.Context, tx *ent.Tx) error {
	return tx.FleetControl.Create().SetID(1).SetGeneration(1).OnConflict().AddGeneration(1).Exec(ctx)
}

// Read reads the fleet's controls and the rollouts in flight.
func Read(ctx context.Context, c *ent.Client) (*State, error) {
	return read(ctx, c, false)
}

// ReadLocked is Read in a transaction that took Lock: its reads are
// locking ones, which read what is committed now, not the transaction's
// snapshot (taken, maybe, before Lock waited for another writer).
func ReadLocked(ctx context.Context, tx *ent.Tx) (*State, error) {
	return read(ctx, tx.Client(), true)
}

// InFlight is the query of the rollouts in flight as a plan reads them:
// in the order they were made, with their deployments' environments.
func InFlight(c *ent.Client) *ent.RolloutQuery {
	return c.Rollout.Query().Where(rollout.InFlightNotNil()).Order(ent.Asc(rollout.FieldID)).WithDeployment(Environments)
}

// Environments loads what a plan needs of a rollout's deployment, its
// environment: for Rollout queries' WithDeployment.
func Environments(q *ent.DeploymentQuery) {
	q.Select(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID)
}

func read(ctx context.Context, c *ent.Client, locked bool) (*State, error) {
	rollouts := InFlight(c)
	if locked {
		rollouts.ForShare(ShareMode)
	}
	s, err := readControls(ctx, c, locked)
	if err != nil {
		return nil, err
	}
	rs, err := rollouts.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		s.Rollouts = append(s.Rollouts, RolloutOf(r))
	}
	return s, nil
}

// ReadControls reads the fleet's controls only, for a caller that read
// the rollouts in flight itself (InFlight) and adds them.
func ReadControls(ctx context.Context, c *ent.Client) (*State, error) {
	return readControls(ctx, c, false)
}

func readControls(ctx context.Context, c *ent.Client, locked bool) (*State, error) {
	halts := c.FleetHalt.Query().Where(fleethalt.LiftedAtIsNil()).Order(ent.Asc(fleethalt.FieldID))
	windows := c.FreezeWindow.Query()
	bounds := c.PacingBound.Query()
	if locked {
		halts.ForShare(ShareMode)
		windows.ForShare(ShareMode)
		bounds.ForShare(ShareMode)
	}
	var s State
	hs, err := halts.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		s.Halts = append(s.Halts, HaltOf(h))
	}
	ws, err := windows.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, row := range ws {
		w, err := WindowOf(row)
		if err != nil {
			// Checked when it was written: a window that cannot be read
			// now (a time zone this build lacks) holds, rather than
			// letting rollouts through a freeze someone meant.
			w = Window{Name: row.Name, WorkspaceID: row.WorkspaceID, EnvironmentID: row.EnvironmentID,
				StartsAt: time.Time{}, EndsAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), Location: time.UTC}
		}
		s.Windows = append(s.Windows, w)
	}
	bs, err := bounds.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		s.Bounds = append(s.Bounds, Bound{Scope: Scope{WorkspaceID: b.WorkspaceID, EnvironmentID: b.EnvironmentID, Region: b.Region}, Max: b.Max})
	}
	return &s, nil
}

// HaltOf is a halt row as a plan reads it.
func HaltOf(h *ent.FleetHalt) Halt {
	return Halt{ID: h.ID, Scope: Scope{WorkspaceID: h.WorkspaceID, EnvironmentID: h.EnvironmentID, Region: h.Region},
		Reason: h.Reason, Actor: h.Actor, Since: h.CreatedAt}
}

// WindowOf is a window row, parsed.
func WindowOf(w *ent.FreezeWindow) (Window, error) {
	out := Window{Name: w.Name, WorkspaceID: w.WorkspaceID, EnvironmentID: w.EnvironmentID, Schedule: w.Schedule,
		Duration: time.Duration(w.DurationSeconds) * time.Second}
	if w.StartsAt != nil {
		out.StartsAt = *w.StartsAt
	}
	if w.EndsAt != nil {
		out.EndsAt = *w.EndsAt
	}
	parsed, err := ParseWindow(out, w.TimeZone)
	if err != nil {
		return out, fmt.Errorf("freeze window %q: %w", w.Name, err)
	}
	return parsed, nil
}

// RolloutOf is a rollout row as a plan reads it; its deployment's
// environment comes from the row's deployment edge when it was loaded.
func RolloutOf(r *ent.Rollout) Rollout {
	out := Rollout{ID: r.ID, DeploymentID: r.DeploymentID, Queued: r.State == rollout.StateQueued, Wave: r.Wave,
		BreakGlass: r.BreakGlassBy != ""}
	if d := r.Edges.Deployment; d != nil {
		out.WorkspaceID, out.EnvironmentID = d.WorkspaceID, d.EnvironmentID
	}
	for _, w := range r.Strategy.Waves {
		out.Waves = append(out.Waves, w.Regions)
	}
	return out
}
