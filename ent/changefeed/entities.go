package changefeed

import (
	"context"
	"fmt"

	"entgo.io/ent"
	"entgo.io/ent/dialect/sql"

	gen "github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
)

// Resource types as change rows name them.
const (
	typeTopology = deploymentchange.ResourceTypeDeploymentTopology
	typeSentinel = deploymentchange.ResourceTypeSentinel
	typePolicy   = deploymentchange.ResourceTypeCiliumNetworkPolicy
)

// DeploymentTopology is the hook for deployment_topology. Its change rows
// carry the deployment ID: (deployment, region) is what an agent applies.
func DeploymentTopology() ent.Hook {
	return feed[*gen.DeploymentTopologyMutation]{
		actualFields: []string{deploymenttopology.FieldActualStatus},
		backfillFields: []string{deploymenttopology.FieldImage, deploymenttopology.FieldCPUMillicores, deploymenttopology.FieldMemoryMib,
			deploymenttopology.FieldPort, deploymenttopology.FieldCommand, deploymenttopology.FieldEnv, deploymenttopology.FieldSpecHash},
		beforeCreate: func(ctx context.Context, m *gen.DeploymentTopologyMutation) error {
			depID, _ := m.DeploymentID()
			return lockParent(ctx, m.Client(), depID)
		},
		created: func(ctx context.Context, m *gen.DeploymentTopologyMutation) ([]target, error) {
			depID, _ := m.DeploymentID()
			region, _ := m.Region()
			return []target{{typeTopology, depID, region}}, nil
		},
		existing: func(ctx context.Context, m *gen.DeploymentTopologyMutation) ([]target, error) {
			ids, err := m.IDs(ctx)
			if err != nil {
				return nil, err
			}
			if pinned(m) {
				m.Where(deploymenttopology.IDIn(ids...))
			}
			rows, err := m.Client().DeploymentTopology.Query().
				Where(deploymenttopology.IDIn(ids...)).
				Select(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion).
				ForUpdate(lockOptions()...).
				All(ctx)
			return topologyTargets(rows), err
		},
	}.hook()
}

// Sentinel is the hook for sentinels.
func Sentinel() ent.Hook {
	return feed[*gen.SentinelMutation]{
		actualFields: []string{sentinel.FieldAvailableReplicas, sentinel.FieldHealth},
		created: func(ctx context.Context, m *gen.SentinelMutation) ([]target, error) {
			// An upsert may have updated the row holding this natural key
			// under another ID, so ask the table rather than the mutation.
			env, _ := m.EnvironmentID()
			region, _ := m.Region()
			if given, ok := m.ID(); ok {
				row, err := m.Client().Sentinel.Query().Where(sentinel.ID(given)).ForUpdate(lockOptions()...).Only(ctx)
				if err == nil && (row.EnvironmentID != env || row.Region != region) {
					return nil, fmt.Errorf("sentinel %q is environment %s's in %s, not %s's in %s: %w", given, row.EnvironmentID, row.Region, env, region, ErrIDInUse)
				}
			}
			id, err := m.Client().Sentinel.Query().
				Where(sentinel.EnvironmentID(env), sentinel.Region(region)).
				ForUpdate(lockOptions()...).
				OnlyID(ctx)
			if err != nil {
				return nil, err
			}
			return []target{{typeSentinel, id, region}}, nil
		},
		existing: func(ctx context.Context, m *gen.SentinelMutation) ([]target, error) {
			ids, err := m.IDs(ctx)
			if err != nil {
				return nil, err
			}
			if pinned(m) {
				m.Where(sentinel.IDIn(ids...))
			}
			rows, err := m.Client().Sentinel.Query().
				Where(sentinel.IDIn(ids...)).
				Select(sentinel.FieldID, sentinel.FieldRegion).
				ForUpdate(lockOptions()...).
				All(ctx)
			targets := make([]target, 0, len(rows))
			for _, r := range rows {
				targets = append(targets, target{typeSentinel, r.ID, r.Region})
			}
			return targets, err
		},
	}.hook()
}

// CiliumNetworkPolicy is the hook for cilium_network_policies. Policies
// have no actual state.
func CiliumNetworkPolicy() ent.Hook {
	return feed[*gen.CiliumNetworkPolicyMutation]{
		beforeCreate: func(ctx context.Context, m *gen.CiliumNetworkPolicyMutation) error {
			if depID, ok := m.DeploymentID(); ok {
				return lockParent(ctx, m.Client(), depID)
			}
			return nil
		},
		created: func(ctx context.Context, m *gen.CiliumNetworkPolicyMutation) ([]target, error) {
			region, _ := m.Region()
			env, _ := m.EnvironmentID()
			name, _ := m.Name()
			if given, ok := m.ID(); ok {
				row, err := m.Client().CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.ID(given)).ForUpdate(lockOptions()...).Only(ctx)
				if err == nil && (row.Region != region || row.EnvironmentID != env || row.Name != name) {
					return nil, fmt.Errorf("policy %q is %s/%s in %s, not %s/%s in %s: %w", given, row.EnvironmentID, row.Name, row.Region, env, name, region, ErrIDInUse)
				}
			}
			id, err := m.Client().CiliumNetworkPolicy.Query().
				Where(ciliumnetworkpolicy.Region(region), ciliumnetworkpolicy.EnvironmentID(env), ciliumnetworkpolicy.Name(name)).
				ForUpdate(lockOptions()...).
				OnlyID(ctx)
			if err != nil {
				return nil, err
			}
			return []target{{typePolicy, id, region}}, nil
		},
		existing: func(ctx context.Context, m *gen.CiliumNetworkPolicyMutation) ([]target, error) {
			ids, err := m.IDs(ctx)
			if err != nil {
				return nil, err
			}
			if pinned(m) {
				m.Where(ciliumnetworkpolicy.IDIn(ids...))
			}
			rows, err := m.Client().CiliumNetworkPolicy.Query().
				Where(ciliumnetworkpolicy.IDIn(ids...)).
				Select(ciliumnetworkpolicy.FieldID, ciliumnetworkpolicy.FieldRegion).
				ForUpdate(lockOptions()...).
				All(ctx)
			return policyTargets(rows), err
		},
	}.hook()
}

// Deployment is the hook for deployments. Agents see none of a
// deployment's own columns: the spec a region runs is its topology's copy
// (a rollout moves the copies a wave at a time), so writing the
// deployments row emits nothing. A delete emits the changes of the
// topologies and policies the database cascades away with it.
func Deployment() ent.Hook {
	return feed[*gen.DeploymentMutation]{
		actualFields:       []string{deployment.FieldWorkflowStatus, deployment.FieldWorkflowError},
		edgesLiveElsewhere: true,
		created: func(ctx context.Context, m *gen.DeploymentMutation) ([]target, error) {
			return nil, nil
		},
		existing: func(ctx context.Context, m *gen.DeploymentMutation) ([]target, error) {
			if !m.Op().Is(ent.OpDelete | ent.OpDeleteOne) {
				return nil, nil
			}
			ids, err := m.IDs(ctx)
			if err != nil {
				return nil, err
			}
			if pinned(m) {
				m.Where(deployment.IDIn(ids...))
			}
			// Lock the deployments before listing what hangs off them. A
			// transaction inserting a child holds a shared lock on its
			// deployment (lockParent, and the foreign key check), so this
			// waits for it to commit or roll back; after it, no child can
			// be added until this transaction ends. The children read next
			// are then exactly those the statement cascades.
			if _, err := m.Client().Deployment.Query().Where(deployment.IDIn(ids...)).ForUpdate(lockOptions()...).IDs(ctx); err != nil {
				return nil, err
			}
			return children(ctx, m.Client(), ids)
		},
	}.hook()
}

// lockingReads is switched off only by a test that shows what the locks
// prevent (the feed checker then finds lost changes).
var lockingReads = true

// lockOptions are the options of every FOR UPDATE here. With locking reads
// off, the lock clause is replaced by a comment, which leaves a plain
// (snapshot) read.
func lockOptions() []sql.LockOption {
	if lockingReads {
		return nil
	}
	return []sql.LockOption{sql.WithLockClause("/* locking reads off */")}
}

// children returns the change targets of the deployments' topologies and
// policies, by locking reads: a locking read sees
// the newest committed rows, where a plain read would see the transaction's
// snapshot and miss a child committed since.
func children(ctx context.Context, client *gen.Client, ids []string) ([]target, error) {
	topologies, err := client.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentIDIn(ids...)).
		Select(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion).
		ForUpdate(lockOptions()...).
		All(ctx)
	if err != nil {
		return nil, err
	}
	policies, err := client.CiliumNetworkPolicy.Query().
		Where(ciliumnetworkpolicy.DeploymentIDIn(ids...)).
		Select(ciliumnetworkpolicy.FieldID, ciliumnetworkpolicy.FieldRegion).
		ForUpdate(lockOptions()...).
		All(ctx)
	return append(topologyTargets(topologies), policyTargets(policies)...), err
}

// ShareLock makes a query a locking read that lets other readers lock the
// same rows: MariaDB has no FOR SHARE; LOCK IN SHARE MODE is its (and
// MySQL's) name for it.
var ShareLock = sql.WithLockClause("LOCK IN SHARE MODE")

// lockParent takes a shared lock on the deployment a child row is about to
// reference, before the insert. The insert's foreign key check would take
// the same lock; taking it first makes the order explicit: a transaction
// deleting or respecifying the deployment either finished before (and the
// insert fails its foreign key, or sees the new spec) or waits for this
// one, then sees the child with its locking read. A missing deployment is
// left to the foreign key check to report.
func lockParent(ctx context.Context, client *gen.Client, deploymentID string) error {
	if !lockingReads {
		return nil
	}
	_, err := client.Deployment.Query().
		Where(deployment.ID(deploymentID)).
		ForShare(ShareLock).
		IDs(ctx)
	return err
}

func topologyTargets(rows []*gen.DeploymentTopology) []target {
	targets := make([]target, 0, len(rows))
	for _, r := range rows {
		targets = append(targets, target{typeTopology, r.DeploymentID, r.Region})
	}
	return targets
}

func policyTargets(rows []*gen.CiliumNetworkPolicy) []target {
	targets := make([]target, 0, len(rows))
	for _, r := range rows {
		targets = append(targets, target{typePolicy, r.ID, r.Region})
	}
	return targets
}
