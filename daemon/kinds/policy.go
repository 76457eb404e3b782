package kinds

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/migrate"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ciliumNetworkPolicies are a CiliumNetworkPolicy in one region; a policy
// has no stopped state.
var ciliumNetworkPolicies = Kind{
	Name:       rpc.KindCiliumNetworkPolicy,
	ChangeType: deploymentchange.ResourceTypeCiliumNetworkPolicy.String(),
	Page:       pagePolicies,
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

// policyPageStatement reads a page of a region's policies in ID order,
// through the region index read as a range (regionIndex): in key order
// through the primary key it would walk every other region's policies
// between the page's.
var policyPageStatement = `SELECT id, workspace_id, environment_id, deployment_id, name, spec
		FROM cilium_network_policies FORCE INDEX (` + regionIndex(migrate.CiliumNetworkPoliciesTable) + `)
		WHERE region = ? AND id > ?
		ORDER BY id LIMIT ?`

// pagePolicies pages by the policy's ID, which is the key.
func pagePolicies(ctx context.Context, c *ent.Client, region, after string, limit int) ([]Event, string, error) {
	rows, err := c.QueryContext(ctx, policyPageStatement, region, after, limit)
	if err != nil {
		return nil, after, fmt.Errorf("read a page of policies: %w", err)
	}
	defer rows.Close()
	var events []Event
	last := after
	for rows.Next() {
		p := &ent.CiliumNetworkPolicy{Region: region}
		var spec []byte
		if err := rows.Scan(&p.ID, &p.WorkspaceID, &p.EnvironmentID, &p.DeploymentID, &p.Name, &spec); err != nil {
			return nil, after, fmt.Errorf("read a page of policies: %w", err)
		}
		if err := json.Unmarshal(spec, &p.Spec); err != nil {
			return nil, after, fmt.Errorf("policy %s: read its spec: %w", p.ID, err)
		}
		ev, err := policyEvent(p)
		if err != nil {
			return nil, after, err
		}
		events = append(events, Event{p.ID, ev})
		last = p.ID
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read a page of policies: %w", err)
	}
	return events, last, nil
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
