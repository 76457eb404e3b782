package desired

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/gatecheck"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/ent/rolloutstrategy"
	"github.com/deploysync/deploysync/internal/validate"
)

// What a failed wave does.
const (
	OnFailureRollback = "rollback"
	OnFailurePause    = "pause"
)

// EveryOtherRegion in a wave's regions stands for every region of the
// deployment that no other wave names.
const EveryOtherRegion = "*"

// Bounds of a strategy: a rollout is a handful of waves over at most
// MaxDeployRegions regions, and a step of it waits for hours at most.
const (
	MaxWaves           = 20
	MaxBake            = 24 * time.Hour
	MaxDeadline        = 24 * time.Hour
	DefaultDeadline    = 10 * time.Minute
	maxStrategyRegions = MaxDeployRegions
)

// CheckStrategy checks a strategy an operator gives and fills in its
// defaults (the deadline, on_failure rollback). An empty strategy (no
// waves) is "immediate": every region gets a change at once, with no
// gate, as before rollouts existed.
func CheckStrategy(s jsontype.Strategy) (jsontype.Strategy, error) {
	switch s.OnFailure {
	case "":
		s.OnFailure = OnFailureRollback
	case OnFailureRollback, OnFailurePause:
	default:
		return s, fmt.Errorf("strategy.on_failure: %w: want %q or %q, got %q", ErrInvalid, OnFailureRollback, OnFailurePause, s.OnFailure)
	}
	if len(s.Waves) == 0 && s.OnFailure != OnFailureRollback {
		// What a failed wave does, for a strategy without waves: stored,
		// it would read as a strategy that pauses, and gate nothing.
		return s, fmt.Errorf("strategy.on_failure: %w: %q says what a failed wave does, and a strategy without waves is immediate (no wave, no gate); give waves, or leave on_failure out",
			ErrInvalid, s.OnFailure)
	}
	if len(s.Waves) > MaxWaves {
		return s, fmt.Errorf("strategy.waves: %w: at most %d waves, got %d", ErrInvalid, MaxWaves, len(s.Waves))
	}
	seen := map[string]int{}
	total := 0
	waves := make([]jsontype.Wave, len(s.Waves))
	for i, w := range s.Waves {
		field := fmt.Sprintf("strategy.waves[%d]", i)
		if len(w.Regions) == 0 {
			return s, fmt.Errorf("%s.regions: %w: a wave names at least one region (or %q, every other one)", field, ErrInvalid, EveryOtherRegion)
		}
		for _, r := range w.Regions {
			if r != EveryOtherRegion {
				if err := validate.Region(r); err != nil {
					return s, fmt.Errorf("%s.regions: %w: %v", field, ErrInvalid, err)
				}
			}
			if j, ok := seen[r]; ok {
				return s, fmt.Errorf("%s.regions: %w: %q is in wave %d already", field, ErrInvalid, r, j)
			}
			seen[r] = i
		}
		if total += len(w.Regions); total > maxStrategyRegions {
			return s, fmt.Errorf("%s.regions: %w: at most %d regions in all", field, ErrInvalid, maxStrategyRegions)
		}
		// Compared in seconds: a huge count multiplied into a Duration
		// would overflow into one that passes.
		if w.BakeSeconds < 0 || w.BakeSeconds > int(MaxBake/time.Second) {
			return s, fmt.Errorf("%s.bake: %w: between 0 and %s, got %ds", field, ErrInvalid, MaxBake, w.BakeSeconds)
		}
		if w.DeadlineSeconds == 0 {
			w.DeadlineSeconds = int(DefaultDeadline / time.Second)
		}
		if w.DeadlineSeconds < 1 || w.DeadlineSeconds > int(MaxDeadline/time.Second) {
			return s, fmt.Errorf("%s.deadline: %w: between 1s and %s, got %ds", field, ErrInvalid, MaxDeadline, w.DeadlineSeconds)
		}
		switch {
		case slices.Contains(w.Regions, EveryOtherRegion) && (w.MaxFailures < 0 || w.MaxFailures > maxStrategyRegions-1):
			// As many regions as a deployment may have, less one: a
			// rollout's own wave keeps at least one region that must
			// pass (planWaves), and shows the bound it applies.
			return s, fmt.Errorf("%s.max_failures: %w: between 0 and %d for a wave with %q (a deployment has at most %d regions, and one must pass), got %d",
				field, ErrInvalid, maxStrategyRegions-1, EveryOtherRegion, maxStrategyRegions, w.MaxFailures)
		case !slices.Contains(w.Regions, EveryOtherRegion) && (w.MaxFailures < 0 || w.MaxFailures >= len(w.Regions)):
			return s, fmt.Errorf("%s.max_failures: %w: between 0 and one less than the wave's %d regions, got %d (a wave all of whose regions may fail gates nothing)",
				field, ErrInvalid, len(w.Regions), w.MaxFailures)
		}
		w.Regions = slices.Clone(w.Regions)
		waves[i] = w
	}
	s.Waves = waves
	checks, err := checkChecks(s)
	if err != nil {
		return s, err
	}
	s.Checks = checks
	return s, nil
}

// checkChecks checks a strategy's checks, each query parsed with
// Prometheus' own parser, and fills in their defaults.
func checkChecks(s jsontype.Strategy) ([]jsontype.Check, error) {
	if len(s.Checks) == 0 {
		return nil, nil
	}
	if len(s.Waves) == 0 {
		return nil, fmt.Errorf("strategy.checks: %w: checks gate waves, and a strategy without waves is immediate (no wave, no gate); give waves, or leave the checks out", ErrInvalid)
	}
	if len(s.Checks) > gatecheck.MaxChecks {
		return nil, fmt.Errorf("strategy.checks: %w: at most %d checks, got %d", ErrInvalid, gatecheck.MaxChecks, len(s.Checks))
	}
	checks := make([]jsontype.Check, len(s.Checks))
	names := map[string]int{}
	for i, c := range s.Checks {
		field := fmt.Sprintf("strategy.checks[%d]", i)
		c, err := gatecheck.Check(c)
		if err != nil {
			return nil, fmt.Errorf("%s.%w", field, invalidCheck{err})
		}
		if j, ok := names[c.Name]; ok {
			return nil, fmt.Errorf("%s.name: %w: %q is check %d's name already", field, ErrInvalid, c.Name, j)
		}
		names[c.Name] = i
		checks[i] = c
	}
	return checks, nil
}

// planWaves is strategy applied to a deployment's regions: each wave with
// the deployment's regions it names, "*" standing for those no other
// wave names. Regions no wave names join the last wave (a strategy set
// for an environment names the regions its deployments usually run in; a
// new region is then not skipped, and not rushed ahead either). A wave of
// "*" alone left with no region is dropped: every region it stands for is
// in another wave. A wave that names regions, none of them the
// deployment's, is refused: dropped, its place (a canary, say) would be
// taken by the next wave, ungated, and a typo of the canary's name would
// send a change everywhere at once. No waves: the change goes everywhere
// at once.
func planWaves(s jsontype.Strategy, id string, regions []string) ([]jsontype.Wave, error) {
	if len(s.Waves) == 0 {
		return nil, nil
	}
	named := map[string]bool{}
	for _, w := range s.Waves {
		for _, r := range w.Regions {
			named[r] = true
		}
	}
	var others []string
	for _, r := range regions {
		if !named[r] {
			others = append(others, r)
		}
	}
	rest := -1 // the wave that takes the others
	for i, w := range s.Waves {
		if slices.Contains(w.Regions, EveryOtherRegion) {
			rest = i
		}
	}
	if rest < 0 {
		rest = len(s.Waves) - 1
	}
	var plan []jsontype.Wave
	for i, w := range s.Waves {
		var in []string
		for _, r := range w.Regions {
			if r != EveryOtherRegion && slices.Contains(regions, r) {
				in = append(in, r)
			}
		}
		if i == rest {
			in = append(in, others...)
		}
		if len(in) == 0 {
			if slices.Contains(w.Regions, EveryOtherRegion) {
				continue
			}
			return nil, fmt.Errorf("deployment %q: %w: wave %d of its rollout strategy (%s) names none of its regions (%s); a wave is never skipped: fix the strategy (`rollout strategy set`), give the call a strategy of its own (--wave), or --immediate",
				id, ErrConflict, i+1, strings.Join(w.Regions, ","), strings.Join(regions, ", "))
		}
		w.Regions = in
		// A wave smaller than the strategy's keeps at least one region
		// that must pass: max_failures counts regions that may fail. The
		// rollout's own copy of the wave, which the views show, says the
		// bound it applies.
		w.MaxFailures = min(w.MaxFailures, len(in)-1)
		plan = append(plan, w)
	}
	return plan, nil
}

// knownStrategyRegions refuses a strategy naming a region no one
// registered, naming it: a typo of a canary's name would otherwise be
// stored and, at every rollout, match nothing. field is the strategy's
// name in the error: "strategy" for an environment's, "rollout" for a
// call's own (the API's fields).
func knownStrategyRegions(ctx context.Context, c *ent.Client, field string, s jsontype.Strategy) error {
	var names []string
	for _, w := range s.Waves {
		for _, r := range w.Regions {
			if r != EveryOtherRegion {
				names = append(names, r)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	known, err := c.Region.Query().Where(region.IDIn(names...)).IDs(ctx)
	if err != nil {
		return err
	}
	for i, w := range s.Waves {
		for _, r := range w.Regions {
			if r != EveryOtherRegion && !slices.Contains(known, r) {
				registered, err := c.Region.Query().Order(ent.Asc(region.FieldID)).Limit(20).IDs(ctx)
				if err != nil {
					return err
				}
				return fmt.Errorf("%s.waves[%d].regions: %w %q: no agent token or entry registers it (registered: %s)",
					field, i, ErrUnknownRegion, r, strings.Join(registered, ", "))
			}
		}
	}
	return nil
}

// SetRolloutStrategy sets the strategy of a workspace's environment: how
// its deployments' deploys, updates and rollbacks roll out unless a call
// gives its own. An empty strategy (no waves) is immediate.
func (s *Store) SetRolloutStrategy(ctx context.Context, workspaceID, environmentID string, strategy jsontype.Strategy) (jsontype.Strategy, error) {
	if err := s.checkPair(workspaceID, environmentID); err != nil {
		return strategy, err
	}
	strategy, err := CheckStrategy(strategy)
	if err != nil {
		return strategy, err
	}
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := knownStrategyRegions(ctx, tx.Client(), "strategy", strategy); err != nil {
			return err
		}
		return tx.RolloutStrategy.Create().SetWorkspaceID(workspaceID).SetEnvironmentID(environmentID).
			SetStrategy(strategy).SetActor(validate.Clip(actorOf(ctx), 255)).
			OnConflictColumns(rolloutstrategy.FieldWorkspaceID, rolloutstrategy.FieldEnvironmentID).
			Update(func(u *ent.RolloutStrategyUpsert) { u.UpdateStrategy().UpdateActor().UpdateUpdatedAt() }).
			Exec(ctx)
	})
	return strategy, err
}

// RolloutStrategy is the strategy of a workspace's environment, empty
// (immediate) when none was set.
func (s *Store) RolloutStrategy(ctx context.Context, workspaceID, environmentID string) (jsontype.Strategy, error) {
	if err := checkID("workspace_id", workspaceID); err != nil {
		return jsontype.Strategy{}, err
	}
	if err := checkID("environment_id", environmentID); err != nil {
		return jsontype.Strategy{}, err
	}
	return environmentStrategy(ctx, s.client, workspaceID, environmentID)
}

func environmentStrategy(ctx context.Context, c *ent.Client, workspaceID, environmentID string) (jsontype.Strategy, error) {
	row, err := c.RolloutStrategy.Query().
		Where(rolloutstrategy.WorkspaceID(workspaceID), rolloutstrategy.EnvironmentID(environmentID)).Only(ctx)
	if ent.IsNotFound(err) {
		return jsontype.Strategy{}, nil
	}
	if err != nil {
		return jsontype.Strategy{}, err
	}
	return row.Strategy, nil
}

// invalidCheck is gatecheck's refusal as this package's ErrInvalid too,
// which callers map to InvalidArgument.
type invalidCheck struct{ error }

func (e invalidCheck) Unwrap() []error { return []error{e.error, ErrInvalid} }
