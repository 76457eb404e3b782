package desired

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/deploysync/deploysync/ent"
)

// RolloutFence is what an operator confirmed an action on: the rollout as
// it was shown to them. ControlRollout acts only when the rollout in
// flight is still that one, at that wave and version; each field that is
// not 0 is checked (the console gives all four; a script may give some).
//
// Version is the rollouts row's version, which every step increments and
// every step is conditional on: checked after the deployment's row lock,
// in the action's transaction, it is exact on one server and on Galera
// (a step committed on another node meanwhile fails this commit's
// certification, and the rerun reads the new version).
type RolloutFence struct {
	RolloutID int
	Revision  int
	// Wave counts from 1, as people (and the API) do.
	Wave    int
	Version int64
}

// given reports whether the fence names anything to check.
func (f RolloutFence) given() bool {
	return f.RolloutID != 0 || f.Revision != 0 || f.Wave != 0 || f.Version != 0
}

// checkFields refuses a fence no rollout can match: a negative field.
func (f RolloutFence) checkFields() error {
	for _, c := range []struct {
		name  string
		value int64
	}{{"rollout_id", int64(f.RolloutID)}, {"revision", int64(f.Revision)}, {"wave", int64(f.Wave)}, {"version", f.Version}} {
		if c.value < 0 {
			return fmt.Errorf("fence.%s: %w: must be 1 or more (0: not checked), got %d", c.name, ErrInvalid, c.value)
		}
	}
	return nil
}

// check fails with ErrRolloutMoved, saying what changed, when the
// rollout in flight (r; nil when none is) is not the one the fence names.
// It reads the rollout the fence names, when another is in flight or none
// is, to say what became of it.
func (f RolloutFence) check(ctx context.Context, tx *ent.Tx, deploymentID string, r *ent.Rollout) error {
	const nothingDone = "nothing was done; look again (`rollout status %s`)"
	if r != nil && (f.RolloutID == 0 || f.RolloutID == r.ID) && (f.Revision == 0 || f.Revision == r.Revision) {
		var changed []string
		where := fmt.Sprintf("%s at wave %d of %d", r.State, r.Wave+1, len(r.Strategy.Waves))
		if f.Wave != 0 && f.Wave != r.Wave+1 {
			where += fmt.Sprintf(" now (was %d)", f.Wave)
			changed = append(changed, "wave")
		}
		version := fmt.Sprintf("version %d", r.Version)
		if f.Version != 0 && f.Version != r.Version {
			version += fmt.Sprintf(" (was %d)", f.Version)
			changed = append(changed, "version")
		}
		if len(changed) == 0 {
			return nil
		}
		return fmt.Errorf("deployment %q: %w: the rollout you confirmed is %s, %s; "+nothingDone,
			deploymentID, ErrRolloutMoved, where, version, deploymentID)
	}
	// Another rollout, or none: say what became of the one confirmed.
	confirmed := "the rollout you confirmed"
	if f.Revision != 0 {
		confirmed += fmt.Sprintf(" (revision %d)", f.Revision)
	}
	if f.RolloutID != 0 {
		old, err := tx.Rollout.Get(ctx, f.RolloutID)
		switch {
		case ent.IsNotFound(err):
			confirmed += " is no rollout of this deployment"
		case err != nil:
			return err
		case old.DeploymentID != deploymentID:
			confirmed += " is no rollout of this deployment"
		case old.InFlight == nil:
			confirmed += fmt.Sprintf(" ended %s", strings.ReplaceAll(string(old.State), "_", " "))
			if old.FinishedAt != nil {
				confirmed += " at " + old.FinishedAt.UTC().Format(time.RFC3339)
			}
		}
	}
	now := "none is in flight"
	if r != nil {
		now = fmt.Sprintf("the one in flight now is revision %d (id %d), %s at wave %d of %d, version %d",
			r.Revision, r.ID, r.State, r.Wave+1, len(r.Strategy.Waves), r.Version)
	}
	return fmt.Errorf("deployment %q: %w: %s; %s; "+nothingDone, deploymentID, ErrRolloutMoved, confirmed, now, deploymentID)
}
