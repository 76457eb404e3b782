package stream

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// resourceKey identifies a resource within a region's stream.
type resourceKey struct {
	typ string
	id  string
}

// loadEvents turns change rows of one region into events carrying the
// resources' current state, with one query per resource type however many
// rows there are. Several rows for one resource become one event (the
// newest version). A row whose resource is gone, or stopped, becomes a
// delete (invariant I4).
//
// All reads share one snapshot (a read-only REPEATABLE READ transaction):
// read one by one, a deployment deleted between the topology read and the
// read of its deployment would leave a topology without one (I6).
func loadEvents(ctx context.Context, db *ent.Client, region string, changes []changelog.Change) ([]*ctrlv1.DeploymentChangeEvent, error) {
	latest := map[resourceKey]uint64{}
	var order []resourceKey
	ids := map[string][]string{}
	for _, c := range changes {
		k := resourceKey{c.Type, c.ResourceID}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
			ids[c.Type] = append(ids[c.Type], c.ResourceID)
		}
		latest[k] = max(latest[k], c.Version)
	}
	if len(order) == 0 {
		return nil, nil
	}
	tx, err := beginSnapshot(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("load events: %w", err)
	}
	defer tx.Rollback()
	client := tx.Client()
	built := map[resourceKey]*ctrlv1.DeploymentChangeEvent{}

	if depIDs := ids[string(deploymentchange.ResourceTypeDeploymentTopology)]; len(depIDs) > 0 {
		topologies, err := client.DeploymentTopology.Query().
			Where(deploymenttopology.Region(region), deploymenttopology.DeploymentIDIn(depIDs...)).
			WithDeployment().All(ctx)
		if err != nil {
			return nil, fmt.Errorf("load topologies: %w", err)
		}
		for _, t := range topologies {
			built[resourceKey{string(deploymentchange.ResourceTypeDeploymentTopology), t.DeploymentID}] = deploymentEvent(t, t.Edges.Deployment)
		}
		// Topologies that are gone: delete, with the namespace when the
		// deployment itself is still there.
		var gone []string
		for _, id := range depIDs {
			if built[resourceKey{string(deploymentchange.ResourceTypeDeploymentTopology), id}] == nil {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			deps, err := client.Deployment.Query().Where(deployment.IDIn(gone...)).All(ctx)
			if err != nil {
				return nil, fmt.Errorf("load deployments: %w", err)
			}
			for _, id := range gone {
				state := &ctrlv1.DeploymentState{DeploymentId: id}
				if i := slices.IndexFunc(deps, func(d *ent.Deployment) bool { return d.ID == id }); i >= 0 {
					state.WorkspaceId, state.EnvironmentId = deps[i].WorkspaceID, deps[i].EnvironmentID
					state.Namespace = naming.Namespace(deps[i].WorkspaceID, deps[i].EnvironmentID)
				}
				built[resourceKey{string(deploymentchange.ResourceTypeDeploymentTopology), id}] = deleteDeployment(state)
			}
		}
	}
	if sentIDs := ids[string(deploymentchange.ResourceTypeSentinel)]; len(sentIDs) > 0 {
		sentinels, err := client.Sentinel.Query().Where(sentinel.IDIn(sentIDs...), sentinel.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("load sentinels: %w", err)
		}
		for _, s := range sentinels {
			built[resourceKey{string(deploymentchange.ResourceTypeSentinel), s.ID}] = sentinelEvent(s)
		}
		for _, id := range sentIDs {
			k := resourceKey{string(deploymentchange.ResourceTypeSentinel), id}
			if built[k] == nil {
				built[k] = deleteSentinel(&ctrlv1.SentinelState{SentinelId: id})
			}
		}
	}
	if polIDs := ids[string(deploymentchange.ResourceTypeCiliumNetworkPolicy)]; len(polIDs) > 0 {
		policies, err := client.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.IDIn(polIDs...), ciliumnetworkpolicy.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("load policies: %w", err)
		}
		for _, p := range policies {
			ev, err := policyEvent(p)
			if err != nil {
				return nil, err
			}
			built[resourceKey{string(deploymentchange.ResourceTypeCiliumNetworkPolicy), p.ID}] = ev
		}
		for _, id := range polIDs {
			k := resourceKey{string(deploymentchange.ResourceTypeCiliumNetworkPolicy), id}
			if built[k] == nil {
				built[k] = deletePolicy(&ctrlv1.CiliumNetworkPolicyState{PolicyId: id})
			}
		}
	}

	events := make([]*ctrlv1.DeploymentChangeEvent, 0, len(order))
	for _, k := range order {
		ev := built[k]
		if ev == nil {
			return nil, fmt.Errorf("change for unknown resource type %q (id %s)", k.typ, k.id)
		}
		ev.Version = latest[k]
		events = append(events, ev)
	}
	return events, nil
}

// beginSnapshot begins a read-only REPEATABLE READ transaction: its reads
// share one snapshot. Callers keep it short and end it before they send
// what they read, so no stream holds a connection while it waits on its
// client (invariant I8).
func beginSnapshot(ctx context.Context, client *ent.Client) (*ent.Tx, error) {
	tx, err := client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return tx, nil
}

// deploymentEvent is the apply (or, when stopped, delete) of a deployment
// in the topology's region. A topology read without its deployment (d nil:
// the deployment was deleted) is a delete.
func deploymentEvent(t *ent.DeploymentTopology, d *ent.Deployment) *ctrlv1.DeploymentChangeEvent {
	if d == nil {
		return deleteDeployment(&ctrlv1.DeploymentState{DeploymentId: t.DeploymentID})
	}
	state := &ctrlv1.DeploymentState{
		DeploymentId:  d.ID,
		WorkspaceId:   d.WorkspaceID,
		EnvironmentId: d.EnvironmentID,
		Namespace:     naming.Namespace(d.WorkspaceID, d.EnvironmentID),
	}
	if t.DesiredStatus == deploymenttopology.DesiredStatusStopped {
		return deleteDeployment(state)
	}
	state.Image = d.Image
	state.Replicas = int32(t.Replicas)
	state.CpuMillicores = int32(d.CPUMillicores)
	state.MemoryMib = int32(d.MemoryMib)
	state.Port = int32(d.Port)
	state.Command = d.Command
	state.Env = d.Env
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: state},
	}}
}

func deleteDeployment(state *ctrlv1.DeploymentState) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_DELETE, Deployment: state},
	}}
}

func sentinelEvent(s *ent.Sentinel) *ctrlv1.DeploymentChangeEvent {
	state := &ctrlv1.SentinelState{
		SentinelId:    s.ID,
		WorkspaceId:   s.WorkspaceID,
		EnvironmentId: s.EnvironmentID,
		Namespace:     naming.Namespace(s.WorkspaceID, s.EnvironmentID),
	}
	if s.DesiredState == sentinel.DesiredStateStopped {
		return deleteSentinel(state)
	}
	state.Image = s.Image
	state.Replicas = int32(s.Replicas)
	state.CpuMillicores = int32(s.CPUMillicores)
	state.MemoryMib = int32(s.MemoryMib)
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Sentinel{
		Sentinel: &ctrlv1.SentinelEvent{Action: ctrlv1.Action_ACTION_APPLY, Sentinel: state},
	}}
}

func deleteSentinel(state *ctrlv1.SentinelState) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Sentinel{
		Sentinel: &ctrlv1.SentinelEvent{Action: ctrlv1.Action_ACTION_DELETE, Sentinel: state},
	}}
}

func policyEvent(p *ent.CiliumNetworkPolicy) (*ctrlv1.DeploymentChangeEvent, error) {
	spec, err := structpb.NewStruct(p.Spec)
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec is not JSON-shaped: %w", p.ID, err)
	}
	state := &ctrlv1.CiliumNetworkPolicyState{
		PolicyId:      p.ID,
		WorkspaceId:   p.WorkspaceID,
		EnvironmentId: p.EnvironmentID,
		Namespace:     naming.Namespace(p.WorkspaceID, p.EnvironmentID),
		Name:          p.Name,
		Spec:          spec,
	}
	if p.DeploymentID != nil {
		state.DeploymentId = *p.DeploymentID
	}
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy{
		CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyEvent{Action: ctrlv1.Action_ACTION_APPLY, CiliumNetworkPolicy: state},
	}}, nil
}

func deletePolicy(state *ctrlv1.CiliumNetworkPolicyState) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy{
		CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyEvent{Action: ctrlv1.Action_ACTION_DELETE, CiliumNetworkPolicy: state},
	}}
}

func bookmark(version uint64, fullSyncDone bool) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Version: version, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{
		Bookmark: &ctrlv1.Bookmark{ResumeVersion: version, FullSyncDone: fullSyncDone},
	}}
}

func resyncRequired(reason string) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_ResyncRequired{
		ResyncRequired: &ctrlv1.ResyncRequired{Reason: reason},
	}}
}
