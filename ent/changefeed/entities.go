package changefeed

import (
	"context"
	"fmt"
	"slices"

	"entgo.io/ent"

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
				row, err := m.Client().Sentinel.Get(ctx, given)
				if err == nil && (row.EnvironmentID != env || row.Region != region) {
					return nil, fmt.Errorf("sentinel %q is environment %s's in %s, not %s's in %s: %w", given, row.EnvironmentID, row.Region, env, region, ErrIDInUse)
				}
			}
			id, err := m.Client().Sentinel.Query().
				Where(sentinel.EnvironmentID(env), sentinel.Region(region)).
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
		created: func(ctx context.Context, m *gen.CiliumNetworkPolicyMutation) ([]target, error) {
			region, _ := m.Region()
			env, _ := m.EnvironmentID()
			name, _ := m.Name()
			if given, ok := m.ID(); ok {
				row, err := m.Client().CiliumNetworkPolicy.Get(ctx, given)
				if err == nil && (row.Region != region || row.EnvironmentID != env || row.Name != name) {
					return nil, fmt.Errorf("policy %q is %s/%s in %s, not %s/%s in %s: %w", given, row.EnvironmentID, row.Name, row.Region, env, name, region, ErrIDInUse)
				}
			}
			id, err := m.Client().CiliumNetworkPolicy.Query().
				Where(ciliumnetworkpolicy.Region(region), ciliumnetworkpolicy.EnvironmentID(env), ciliumnetworkpolicy.Name(name)).
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
				All(ctx)
			return policyTargets(rows), err
		},
	}.hook()
}

// deploymentSpec are the deployment fields agents apply; changing one
// changes the workload in every region the deployment runs in.
var deploymentSpec = []string{
	deployment.FieldImage, deployment.FieldCPUMillicores, deployment.FieldMemoryMib,
	deployment.FieldPort, deployment.FieldCommand, deployment.FieldEnv,
}

// Deployment is the hook for deployments: a spec change emits a topology
// change per region; a delete also emits the changes of the topologies and
// policies the database cascades away with it.
func Deployment() ent.Hook {
	return feed[*gen.DeploymentMutation]{
		actualFields:       []string{deployment.FieldWorkflowStatus, deployment.FieldWorkflowError},
		edgesLiveElsewhere: true,
		// A new deployment has no topologies yet, so this finds some only
		// when an upsert updated an existing deployment's spec.
		created: func(ctx context.Context, m *gen.DeploymentMutation) ([]target, error) {
			id, _ := m.ID()
			topologies, err := m.Client().DeploymentTopology.Query().
				Where(deploymenttopology.DeploymentID(id)).
				Select(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion).
				All(ctx)
			return topologyTargets(topologies), err
		},
		existing: func(ctx context.Context, m *gen.DeploymentMutation) ([]target, error) {
			deleting := m.Op().Is(ent.OpDelete | ent.OpDeleteOne)
			touched := slices.Concat(m.Fields(), m.AddedFields(), m.ClearedFields())
			if !deleting && !slices.ContainsFunc(touched, func(f string) bool { return slices.Contains(deploymentSpec, f) }) {
				return nil, nil
			}
			ids, err := m.IDs(ctx)
			if err != nil {
				return nil, err
			}
			if pinned(m) {
				m.Where(deployment.IDIn(ids...))
			}
			topologies, err := m.Client().DeploymentTopology.Query().
				Where(deploymenttopology.DeploymentIDIn(ids...)).
				Select(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion).
				All(ctx)
			if err != nil || !deleting {
				return topologyTargets(topologies), err
			}
			policies, err := m.Client().CiliumNetworkPolicy.Query().
				Where(ciliumnetworkpolicy.DeploymentIDIn(ids...)).
				Select(ciliumnetworkpolicy.FieldID, ciliumnetworkpolicy.FieldRegion).
				All(ctx)
			return append(topologyTargets(topologies), policyTargets(policies)...), err
		},
	}.hook()
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
