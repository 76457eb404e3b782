package changefeed

import (
	"context"
	"fmt"
	"slices"

	"entgo.io/ent"

	gen "github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
)

// target is one (resource, region) a mutation affected.
type target struct {
	typ    deploymentchange.ResourceType
	id     string
	region string
}

// mutation is what the feed needs of a generated mutation.
type mutation interface {
	ent.Mutation
	Client() *gen.Client
	Tx() (*gen.Tx, error)
}

// feed describes one desired-state entity to the generic hook.
type feed[M mutation] struct {
	// actualFields may be written through ActualState (updated_at always).
	actualFields []string
	// backfillFields may be written through Backfill.
	backfillFields []string
	// beforeCreate, when set, runs before a create's statement (to lock
	// the rows it will reference).
	beforeCreate func(ctx context.Context, m M) error
	// created returns what a create (or upsert) affected; it runs after
	// the statement.
	created func(ctx context.Context, m M) ([]target, error)
	// existing returns what an update or delete will affect, pins bulk
	// statements to it and locks those rows; it runs before the statement.
	existing func(ctx context.Context, m M) ([]target, error)
	// edgesLiveElsewhere: the entity's edges are foreign keys in other
	// desired-state tables, so edge writes through it are refused.
	edgesLiveElsewhere bool
}

func (f feed[M]) hook() ent.Hook {
	return func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, mv ent.Mutation) (ent.Value, error) {
			m, ok := mv.(M)
			if !ok {
				return nil, fmt.Errorf("changefeed: unexpected mutation type %T", mv)
			}
			if isActualState(ctx) {
				if err := checkActualState(m, f.actualFields); err != nil {
					return nil, err
				}
				return next.Mutate(ctx, m)
			}
			if isBackfill(ctx) {
				if err := checkActualState(m, f.backfillFields); err != nil {
					return nil, err
				}
				return next.Mutate(ctx, m)
			}
			if _, err := m.Tx(); err != nil {
				return nil, fmt.Errorf("%s %s: %w", m.Op(), m.Type(), ErrNotInTx)
			}
			if edges := slices.Concat(m.AddedEdges(), m.RemovedEdges(), m.ClearedEdges()); f.edgesLiveElsewhere && len(edges) > 0 {
				return nil, fmt.Errorf("%s %s edges %v: %w", m.Op(), m.Type(), edges, ErrEdgeThroughParent)
			}
			if m.Op().Is(ent.OpCreate) {
				if f.beforeCreate != nil {
					if err := f.beforeCreate(ctx, m); err != nil {
						return nil, fmt.Errorf("changefeed: lock for %s: %w", m.Type(), err)
					}
				}
				v, err := next.Mutate(ctx, m)
				if err != nil {
					return nil, err
				}
				targets, err := f.created(ctx, m)
				if err != nil {
					return nil, fmt.Errorf("changefeed: resolve created %s: %w", m.Type(), err)
				}
				return v, record(ctx, m.Client(), targets)
			}
			targets, err := f.existing(ctx, m)
			if err != nil {
				return nil, fmt.Errorf("changefeed: resolve affected %s: %w", m.Type(), err)
			}
			v, err := next.Mutate(ctx, m)
			if err != nil {
				return nil, err
			}
			return v, record(ctx, m.Client(), targets)
		})
	}
}

// record inserts one change row per distinct target.
func record(ctx context.Context, client *gen.Client, targets []target) error {
	seen := make(map[target]bool, len(targets))
	builders := make([]*gen.DeploymentChangeCreate, 0, len(targets))
	for _, t := range targets {
		if seen[t] {
			continue
		}
		seen[t] = true
		builders = append(builders, client.DeploymentChange.Create().
			SetResourceType(t.typ).
			SetResourceID(t.id).
			SetRegion(t.region))
	}
	if len(builders) == 0 {
		return nil
	}
	if err := client.DeploymentChange.CreateBulk(builders...).Exec(ctx); err != nil {
		return fmt.Errorf("changefeed: insert deployment_changes: %w", err)
	}
	return nil
}

// pinned reports whether m is a bulk statement that must be narrowed to the
// IDs resolved for it.
func pinned(m ent.Mutation) bool {
	return m.Op().Is(ent.OpUpdate | ent.OpDelete)
}

type actualStateKey struct{}

// ActualState marks ctx for writing actual state (what agents report:
// topology status, sentinel replicas and health, deploy workflow progress)
// without change rows. Only updates of those fields are accepted; anything
// else fails with ErrNotActualState. Such writes need no transaction.
func ActualState(ctx context.Context) context.Context {
	return context.WithValue(ctx, actualStateKey{}, true)
}

type backfillKey struct{}

// Backfill marks ctx for filling in a column added to desired state with
// the value agents already run, read from where it was kept before (a
// region's copy of its deployment's spec, see daemon/desired's
// FillTopologySpecs): no change rows, since nothing changes for agents,
// and a change row per resource would have every agent re-apply
// everything at once. Only updates of the entity's backfill fields are
// accepted.
func Backfill(ctx context.Context) context.Context {
	return context.WithValue(ctx, backfillKey{}, true)
}

func isBackfill(ctx context.Context) bool {
	v, _ := ctx.Value(backfillKey{}).(bool)
	return v
}

func isActualState(ctx context.Context) bool {
	v, _ := ctx.Value(actualStateKey{}).(bool)
	return v
}

func checkActualState(m ent.Mutation, allowed []string) error {
	if !m.Op().Is(ent.OpUpdate | ent.OpUpdateOne) {
		return fmt.Errorf("%s %s: %w (only updates are)", m.Op(), m.Type(), ErrNotActualState)
	}
	touched := slices.Concat(m.Fields(), m.AddedFields(), m.ClearedFields())
	for _, f := range touched {
		if f != "updated_at" && !slices.Contains(allowed, f) {
			return fmt.Errorf("%s field %q is desired state: %w", m.Type(), f, ErrNotActualState)
		}
	}
	if len(m.AddedEdges())+len(m.RemovedEdges())+len(m.ClearedEdges()) > 0 {
		return fmt.Errorf("%s edges are desired state: %w", m.Type(), ErrNotActualState)
	}
	return nil
}
