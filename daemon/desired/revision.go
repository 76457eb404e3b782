package desired

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/internal/validate"
)

// The actions a revision records.
const (
	ActionDeploy   = "deploy"
	ActionUpdate   = "update"
	ActionScale    = "scale"
	ActionStart    = "start"
	ActionStop     = "stop"
	ActionRollback = "rollback"
)

type actorKey struct{}

// WithActor names who acts (an operator token's name) for the revisions
// the calls made with ctx write.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

func actorOf(ctx context.Context) string {
	actor, _ := ctx.Value(actorKey{}).(string)
	return actor
}

// revise runs mutate on deployment id in one transaction that also writes
// the revision it makes, and returns that revision's number. The
// deployment's row lock comes first: every revising action holds it, so
// they run one at a time per deployment and each reads the newest revision
// (the unique (deployment_id, revision) index is the backstop, see
// writeRevision). Taken before any plain read, so the transaction's
// snapshot is taken after the previous action committed.
//
// A mutate that changes the deployment's spec (its row) says so
// (newSpec): the regions then move to it under the call's rollout
// strategy (rollOut), in the same transaction.
func (s *Store) revise(ctx context.Context, id, action string, mutate func(tx *ent.Tx) (newSpec bool, err error)) (revision int, err error) {
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		locked, err := tx.Deployment.Query().Where(deployment.ID(id)).ForUpdate().IDs(ctx)
		if err != nil {
			return err
		}
		if len(locked) == 0 {
			return fmt.Errorf("deployment %q: %w", id, ErrNotFound)
		}
		before, err := lastChange(ctx, tx, id)
		if err != nil {
			return err
		}
		newSpec, err := mutate(tx)
		if err != nil {
			return err
		}
		if newSpec {
			dep, err := tx.Deployment.Get(ctx, id)
			if err != nil {
				return err
			}
			next, err := nextRevision(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := s.rollOut(ctx, tx, dep, next, storedSpec(specOf(dep)), before); err != nil {
				return err
			}
		}
		revision, err = writeRevision(ctx, tx, id, action, before)
		return err
	})
	return revision, invalidField(err)
}

// lastChange is the newest deployment_changes pk of the deployment's
// topologies that tx sees, 0 when none.
func lastChange(ctx context.Context, tx *ent.Tx, id string) (uint64, error) {
	span, err := changelog.ResourceSpan(ctx, tx, deploymentchange.ResourceTypeDeploymentTopology.String(), id, 0)
	return span.Hi, err
}

// writeRevision records the deployment's spec as tx now has it, after an
// action whose change rows are the ones above before.
//
// Why MIN/MAX above before are exactly this transaction's rows: both reads
// are plain reads of one REPEATABLE READ snapshot (taken after the
// deployment's row lock, see revise). Another transaction's row is either
// in that snapshot, and then at most before, or not visible to either
// read; the rows this transaction wrote are always visible to it. The row
// locks (revise's, the change feed's on the topologies, oneDeployAtATime
// for deploys) add that no other writer of this deployment's rows runs
// meanwhile at all.
func writeRevision(ctx context.Context, tx *ent.Tx, id, action string, before uint64) (int, error) {
	dep, err := tx.Deployment.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	topologies, err := tx.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(id)).All(ctx)
	if err != nil {
		return 0, err
	}
	regions := make(map[string]jsontype.RegionSpec, len(topologies))
	for _, t := range topologies {
		regions[t.Region] = jsontype.RegionSpec{Replicas: t.Replicas, Status: string(t.DesiredStatus)}
	}
	revision, err := nextRevision(ctx, tx, id)
	if err != nil {
		return 0, err
	}
	span, err := changelog.ResourceSpan(ctx, tx, deploymentchange.ResourceTypeDeploymentTopology.String(), id, before)
	if err != nil {
		return 0, err
	}
	err = tx.DeploymentRevision.Create().
		SetDeploymentID(id).SetRevision(revision).SetAction(action).SetActor(validate.Clip(actorOf(ctx), 255)).
		SetImage(dep.Image).SetCPUMillicores(dep.CPUMillicores).SetMemoryMib(dep.MemoryMib).SetPort(dep.Port).
		SetCommand(dep.Command).SetEnv(dep.Env).SetRegions(regions).
		SetFirstVersion(span.Lo).SetLastVersion(span.Hi).
		Exec(ctx)
	if ent.IsConstraintError(err) {
		// Only a writer that skipped the deployment's lock gets here: on
		// one server, none of ours; on a Galera cluster, where row locks
		// do not reach the other nodes, one revising the same deployment
		// through another node, whose revision committed first. The rerun
		// store.WithTx gives a conflict reads it and makes the next one.
		return 0, rerun{fmt.Errorf("deployment %q revision %d: %w", id, revision, ErrConcurrentChange)}
	}
	return revision, err
}

// nextRevision is the number of the deployment's next revision. A
// deployment from before revisions has none: its current spec is revision
// 0, and the next is 1.
func nextRevision(ctx context.Context, tx *ent.Tx, id string) (int, error) {
	previous, err := tx.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id)).
		Order(ent.Desc(deploymentrevision.FieldRevision)).Limit(1).All(ctx)
	if err != nil || len(previous) == 0 {
		return 1, err
	}
	return previous[0].Revision + 1, nil
}

// runsNothing tells whether no region of the deployment runs a spec: a
// new deployment whose first rollout rolled back (its regions' copies
// are empty, its own row keeps the spec that failed).
func runsNothing(ctx context.Context, tx *ent.Tx, id string) (bool, error) {
	hashes, err := tx.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(id)).
		Select(deploymenttopology.FieldSpecHash).Strings(ctx)
	if err != nil || len(hashes) == 0 {
		return false, err
	}
	return !slices.ContainsFunc(hashes, func(h string) bool { return h != "" }), nil
}

// SpecUpdate is what UpdateDeployment changes: each field that is set
// replaces the current value; Env entries are added or replaced, or, with
// ReplaceEnv, become the whole environment.
type SpecUpdate struct {
	Image         *string
	CPUMillicores *int
	MemoryMiB     *int
	Env           map[string]string
	ReplaceEnv    bool
}

// UpdateDeployment changes a deployment's spec in every region it runs in
// and returns the revision it made.
func (s *Store) UpdateDeployment(ctx context.Context, id string, u SpecUpdate) (int, error) {
	if err := checkID("deployment_id", id); err != nil {
		return 0, err
	}
	if u.Image == nil && u.CPUMillicores == nil && u.MemoryMiB == nil && len(u.Env) == 0 && !u.ReplaceEnv {
		return 0, fmt.Errorf("image, cpu_millicores, memory_mib, env: %w: set at least one", ErrInvalid)
	}
	return s.revise(ctx, id, ActionUpdate, func(tx *ent.Tx) (bool, error) {
		if err := noRolloutInFlight(ctx, tx, id); err != nil {
			return false, err
		}
		dep, err := tx.Deployment.Get(ctx, id)
		if err != nil {
			return false, err
		}
		current := specOf(dep)
		next := current
		next.Env = maps.Clone(current.Env)
		if u.Image != nil {
			next.Image = *u.Image
		}
		if u.CPUMillicores != nil {
			next.CPUMillicores = *u.CPUMillicores
		}
		if u.MemoryMiB != nil {
			next.MemoryMiB = *u.MemoryMiB
		}
		if u.ReplaceEnv || next.Env == nil {
			next.Env = map[string]string{}
		}
		maps.Copy(next.Env, u.Env)
		idle, err := runsNothing(ctx, tx, id)
		if err != nil {
			return false, err
		}
		// A new deployment whose first rollout rolled back keeps the
		// spec that failed in its row while its regions run nothing:
		// the same values again are a retry, not "nothing to change".
		if next.runsLike(current) && !idle {
			return false, fmt.Errorf("image, cpu_millicores, memory_mib, env: %w: deployment %q has these values already; nothing to change", ErrInvalid, id)
		}
		if err := checkCommandAndEnv(next); err != nil {
			return false, err
		}
		return true, tx.Deployment.UpdateOneID(id).SetImage(next.Image).SetCPUMillicores(next.CPUMillicores).
			SetMemoryMib(next.MemoryMiB).SetEnv(next.Env).Exec(ctx)
	})
}

// Rollback restores revision to of a deployment (0: the one before the
// current): its spec and every region's replicas, but not whether a region
// runs (start and stop are actions of their own), and not regions the
// revision does not name. It returns the revision it made and the one it
// restored.
func (s *Store) Rollback(ctx context.Context, id string, to int) (revision, restored int, err error) {
	if err := checkID("deployment_id", id); err != nil {
		return 0, 0, err
	}
	if to < 0 {
		return 0, 0, fmt.Errorf("to_revision: %w: want a revision number, or 0 for the newest earlier one with another spec or other replicas; got %d", ErrInvalid, to)
	}
	revision, err = s.revise(ctx, id, ActionRollback, func(tx *ent.Tx) (newSpec bool, err error) {
		if err := noRolloutInFlight(ctx, tx, id); err != nil {
			return false, err
		}
		target, err := rollbackTarget(ctx, tx, id, to)
		if err != nil {
			return false, err
		}
		restored = target.Revision
		dep, err := tx.Deployment.Get(ctx, id)
		if err != nil {
			return false, err
		}
		idle, err := runsNothing(ctx, tx, id)
		if err != nil {
			return false, err
		}
		if !specOf(dep).runsLike(revisionSpec(target)) || idle {
			newSpec = true
			err := tx.Deployment.UpdateOneID(id).SetImage(target.Image).SetCPUMillicores(target.CPUMillicores).
				SetMemoryMib(target.MemoryMib).SetPort(target.Port).SetCommand(target.Command).SetEnv(target.Env).Exec(ctx)
			if err != nil {
				return false, err
			}
		}
		changed := newSpec
		for _, region := range slices.Sorted(maps.Keys(target.Regions)) {
			// Only rows whose replicas differ: an unchanged row would
			// send its agent a change that changes nothing.
			n, err := tx.DeploymentTopology.Update().
				Where(deploymenttopology.DeploymentID(id), deploymenttopology.Region(region),
					deploymenttopology.ReplicasNEQ(target.Regions[region].Replicas)).
				SetReplicas(target.Regions[region].Replicas).Save(ctx)
			if err != nil {
				return false, err
			}
			changed = changed || n > 0
		}
		if !changed {
			return false, fmt.Errorf("deployment %q: %w: its spec and replicas are those of revision %d already (rollback does not start or stop regions)",
				id, ErrNothingToRollBack, target.Revision)
		}
		return newSpec, nil
	})
	return revision, restored, err
}

// rollbackTarget is the revision Rollback restores: to, or (to 0) the
// newest earlier revision whose spec or replicas differ from the current
// one's. Revisions that only started or stopped regions are passed over:
// rollback does not restore those, so "the previous spec" is the last one
// that was different.
func rollbackTarget(ctx context.Context, tx *ent.Tx, id string, to int) (*ent.DeploymentRevision, error) {
	q := tx.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id))
	if to > 0 {
		r, err := q.Where(deploymentrevision.Revision(to)).Only(ctx)
		if ent.IsNotFound(err) {
			return nil, fmt.Errorf("to_revision: revision %d of deployment %q: %w", to, id, ErrNotFound)
		}
		return r, err
	}
	const page = 100
	var current *ent.DeploymentRevision
	for offset := 0; ; offset += page {
		revisions, err := q.Clone().Order(ent.Desc(deploymentrevision.FieldRevision)).Offset(offset).Limit(page).All(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range revisions {
			if current == nil {
				current = r
			} else if !sameSpecAndReplicas(current, r) {
				return r, nil
			}
		}
		if len(revisions) < page {
			break
		}
	}
	return nil, fmt.Errorf("deployment %q: %w: no earlier revision has another spec or other replicas (history starts with the first action after ctrld began recording it; start and stop are not rolled back)",
		id, ErrNothingToRollBack)
}

// sameSpecAndReplicas reports whether two revisions run the same spec
// with the same replicas in every region; desired status aside.
func sameSpecAndReplicas(a, b *ent.DeploymentRevision) bool {
	if !revisionSpec(a).runsLike(revisionSpec(b)) || len(a.Regions) != len(b.Regions) {
		return false
	}
	for region, spec := range a.Regions {
		if other, ok := b.Regions[region]; !ok || other.Replicas != spec.Replicas {
			return false
		}
	}
	return true
}

// specOf is the spec a deployment runs now.
func specOf(d *ent.Deployment) DeploymentSpec {
	return DeploymentSpec{ID: d.ID, WorkspaceID: d.WorkspaceID, EnvironmentID: d.EnvironmentID,
		Image: d.Image, CPUMillicores: d.CPUMillicores, MemoryMiB: d.MemoryMib, Port: d.Port,
		Command: d.Command, Env: d.Env}
}

// revisionSpec is the spec a revision recorded.
func revisionSpec(r *ent.DeploymentRevision) DeploymentSpec {
	return DeploymentSpec{ID: r.DeploymentID,
		Image: r.Image, CPUMillicores: r.CPUMillicores, MemoryMiB: r.MemoryMib, Port: r.Port,
		Command: r.Command, Env: r.Env}
}

// runsLike reports whether two specs run the same thing: what every
// region shares and a rollback restores (its IDs aside). The one
// comparison of specs: a change to one compared field and not another
// would make an update refuse real changes, or a rollback skip them.
func (s DeploymentSpec) runsLike(o DeploymentSpec) bool {
	return s.Image == o.Image && s.CPUMillicores == o.CPUMillicores && s.MemoryMiB == o.MemoryMiB &&
		s.Port == o.Port && slices.Equal(s.Command, o.Command) && maps.Equal(s.Env, o.Env)
}

// History is a deployment's newest revisions, newest first, at most limit
// and, when there is one, the revision before the oldest of them (so that
// each listed one can say what it changed).
func (s *Store) History(ctx context.Context, id string, limit int) (revisions []*ent.DeploymentRevision, before *ent.DeploymentRevision, err error) {
	if err := checkID("deployment_id", id); err != nil {
		return nil, nil, err
	}
	exists, err := s.client.Deployment.Query().Where(deployment.ID(id)).Exist(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !exists {
		return nil, nil, fmt.Errorf("deployment %q: %w", id, ErrNotFound)
	}
	revisions, err = s.client.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id)).
		Order(ent.Desc(deploymentrevision.FieldRevision)).Limit(limit + 1).All(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(revisions) > limit {
		before = revisions[limit]
		revisions = revisions[:limit]
	}
	return revisions, before, nil
}

// rerun marks err as a store.ErrConflict, which store.WithTx runs again,
// without changing its text.
type rerun struct{ error }

func (r rerun) Unwrap() error      { return r.error }
func (rerun) Is(target error) bool { return target == store.ErrConflict }
