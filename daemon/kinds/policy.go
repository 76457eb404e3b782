package kinds

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ciliumNetworkPolicies are a CiliumNetworkPolicy in one region; a policy
// has no stopped state.
var ciliumNetworkPolicies = Kind{
	Name:       rpc.KindCiliumNetworkPolicy,
	ChangeType: deploymentchange.ResourceTypeCiliumNetworkPolicy.String(),
	Page: func(ctx context.Context, c *ent.Client, region, after string, limit int) ([]Event, string, error) {
		rows, err := c.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.Region(region), ciliumnetworkpolicy.IDGT(after)).
			Order(ent.Asc(ciliumnetworkpolicy.FieldID)).Limit(limit).All(ctx)
		if err != nil || len(rows) == 0 {
			return nil, after, err
		}
		events := make([]Event, len(rows))
		for i, p := range rows {
			ev, err := policyEvent(p)
			if err != nil {
				return nil, after, err
			}
			events[i] = Event{p.ID, ev}
		}
		return events, rows[len(rows)-1].ID, nil
	},
	Load: func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]*ctrlv1.DeploymentChangeEvent, error) {
		rows, err := c.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.IDIn(ids...), ciliumnetworkpolicy.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("load policies: %w", err)
		}
		built := make(map[string]*ctrlv1.DeploymentChangeEvent, len(ids))
		for _, p := range rows {
			if built[p.ID], err = policyEvent(p); err != nil {
				return nil, err
			}
		}
		for _, id := range ids {
			if built[id] == nil {
				built[id] = deletePolicy(&ctrlv1.CiliumNetworkPolicyState{PolicyId: id})
			}
		}
		return built, nil
	},
	Desired: func(ctx context.Context, c *ent.Client, region string, ids []string) ([]string, error) {
		return c.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.Region(region), ciliumnetworkpolicy.IDIn(ids...)).IDs(ctx)
	},
	Describe: func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]string, error) {
		rows, err := c.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.IDIn(ids...), ciliumnetworkpolicy.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the policies: %w", err)
		}
		now := map[string]string{}
		for _, p := range rows {
			now[p.ID] = "desired: policy " + p.Name
		}
		return now, nil
	},
	DesiredSQL: "SELECT 1 FROM cilium_network_policies d WHERE d.id = s.resource_id AND d.region = s.region",
}

func policyEvent(p *ent.CiliumNetworkPolicy) (*ctrlv1.DeploymentChangeEvent, error) {
	spec, err := structpb.NewStruct(p.Spec)
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec is not JSON-shaped: %w", p.ID, err)
	}
	state := &ctrlv1.CiliumNetworkPolicyState{
		PolicyId:  p.ID,
		Namespace: naming.Namespace(p.WorkspaceID, p.EnvironmentID),
		Name:      p.Name,
		Spec:      spec,
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
