package kinds

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/migrate"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// deployments is a deployment's run in one region: its deployment_topology
// row (the spec the region runs, replicas, running or stopped) in the
// deployment's namespace. A topology with no spec yet (a new deployment's
// rollout has not reached the region) runs nothing: a delete.
var deployments = Kind{
	Name:       rpc.KindDeployment,
	ChangeType: deploymentchange.ResourceTypeDeploymentTopology.String(),
	Page:       pageDeployments,
	Load:       loadDeployments,
	Desired: func(ctx context.Context, c *ent.Client, region string, ids []string) ([]string, error) {
		return c.DeploymentTopology.Query().
			Where(deploymenttopology.Region(region), deploymenttopology.DeploymentIDIn(ids...), deploymenttopology.SpecHashNEQ("")).
			Select(deploymenttopology.FieldDeploymentID).Strings(ctx)
	},
	Describe: func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]string, error) {
		topologies, err := c.DeploymentTopology.Query().
			Where(deploymenttopology.DeploymentIDIn(ids...), deploymenttopology.Region(region), deploymenttopology.SpecHashNEQ("")).
			All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the topologies: %w", err)
		}
		now := map[string]string{}
		for _, t := range topologies {
			now[t.DeploymentID] = DescribeState(string(t.DesiredStatus), t.Replicas, t.Image)
		}
		return now, nil
	},
	DesiredSQL: "SELECT 1 FROM deployment_topology d WHERE d.deployment_id = s.resource_id AND d.region = s.region AND d.spec_hash <> ''",
}

// pageStatement reads a page of a region's running deployments: each
// topology row with its spec, joined with its deployment for the
// namespace, in the order of the topology's own ID, which the region index
// orders (read as a range, regionIndex). A topology whose deployment is
// gone reads present false. Topologies with no spec yet are not listed.
var pageStatement = `SELECT t.id, t.deployment_id, t.replicas, d.id IS NOT NULL,
		COALESCE(d.workspace_id, ''), COALESCE(d.environment_id, ''), t.image,
		t.cpu_millicores, t.memory_mib, t.port, t.command, t.env, t.spec_hash
		FROM deployment_topology t FORCE INDEX (` + regionIndex(migrate.DeploymentTopologyTable) + `)
		LEFT JOIN deployments d ON d.id = t.deployment_id
		WHERE t.region = ? AND t.desired_status = ? AND t.id > ? AND t.spec_hash <> ''
		ORDER BY t.id LIMIT ?`

// pageDeployments pages by the topology row's own ID; the key is that ID
// as text. One statement, a topology joined with its deployment (a
// consistent snapshot by itself): Ent would read the deployments with a
// second statement, which needs a transaction around both and so three
// more round trips per page.
//
// A full sync reads every deployment of the region through here, so a row
// costs what its event keeps and little more: the columns are scanned into
// the same variables row after row, text the event does not keep is read
// in place (sql.RawBytes), and the namespace of a workspace's environment
// is built once a page. Allocating all of it afresh for each row was half
// of the page's CPU.
func pageDeployments(ctx context.Context, c *ent.Client, region, after string, limit int) ([]Event, string, error) {
	afterID := 0
	if after != "" {
		var err error
		if afterID, err = strconv.Atoi(after); err != nil {
			return nil, "", fmt.Errorf("deployments: page key %q: %w", after, err)
		}
	}
	rows, err := c.QueryContext(ctx, pageStatement, region, deploymenttopology.DesiredStatusRunning, afterID, limit)
	if err != nil {
		return nil, after, fmt.Errorf("read a page of deployments: %w", err)
	}
	defer rows.Close()
	var (
		t                                    ent.DeploymentTopology
		present                              bool
		workspace, environment, command, env sql.RawBytes
		namespaces                           namespaceCache
	)
	columns := []any{&t.ID, &t.DeploymentID, &t.Replicas, &present,
		&workspace, &environment, &t.Image, &t.CPUMillicores, &t.MemoryMib, &t.Port, &command, &env, &t.SpecHash}
	events := make([]Event, 0, min(limit, 1024))
	for rows.Next() {
		// Command and env are decoded into fresh values: the last row's
		// event holds its own.
		t = ent.DeploymentTopology{DesiredStatus: deploymenttopology.DesiredStatusRunning}
		if err := rows.Scan(columns...); err != nil {
			return nil, after, fmt.Errorf("read a page of deployments: %w", err)
		}
		if !present { // deleted since its topology was written (I6)
			events = append(events, Event{t.DeploymentID, deleteDeployment(&ctrlv1.DeploymentState{DeploymentId: t.DeploymentID})})
			continue
		}
		if err := unmarshalIfSet(command, &t.Command); err != nil {
			return nil, after, fmt.Errorf("deployment %s: command: %w", t.DeploymentID, err)
		}
		if err := unmarshalIfSet(env, &t.Env); err != nil {
			return nil, after, fmt.Errorf("deployment %s: env: %w", t.DeploymentID, err)
		}
		events = append(events, Event{t.DeploymentID, deploymentEventIn(&t, namespaces.of(workspace, environment))})
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read a page of deployments: %w", err)
	}
	if len(events) == 0 {
		return nil, after, nil
	}
	return events, strconv.Itoa(t.ID), nil
}

// namespaceCache holds the namespaces of the workspaces' environments a
// page has met, by workspace and environment ID: most deployments share
// their environment with others.
type namespaceCache struct {
	byIDs map[string]string
	key   []byte
}

// of returns the namespace of environment in workspace, given as the
// column bytes it does not keep.
func (c *namespaceCache) of(workspace, environment []byte) string {
	// IDs are DNS labels (internal/validate): no NUL inside either.
	c.key = append(append(append(c.key[:0], workspace...), 0), environment...)
	if ns, ok := c.byIDs[string(c.key)]; ok {
		return ns
	}
	if c.byIDs == nil {
		c.byIDs = map[string]string{}
	}
	ns := naming.Namespace(string(workspace), string(environment))
	c.byIDs[string(c.key)] = ns
	return ns
}

// unmarshalIfSet decodes a JSON column into v, leaving v as it is for
// NULL or empty (the column is optional; Ent reads both as unset).
func unmarshalIfSet(data []byte, v any) error {
	if len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, v)
}

func loadDeployments(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]*ctrlv1.DeploymentChangeEvent, error) {
	topologies, err := c.DeploymentTopology.Query().
		Where(deploymenttopology.Region(region), deploymenttopology.DeploymentIDIn(ids...)).
		WithDeployment().All(ctx)
	if err != nil {
		return nil, fmt.Errorf("load topologies: %w", err)
	}
	built := make(map[string]*ctrlv1.DeploymentChangeEvent, len(ids))
	for _, t := range topologies {
		built[t.DeploymentID] = deploymentEvent(t, t.Edges.Deployment)
	}
	// Topologies that are gone: delete, with the namespace when the
	// deployment itself is still there.
	var gone []string
	for _, id := range ids {
		if built[id] == nil {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return built, nil
	}
	deps, err := c.Deployment.Query().Where(deployment.IDIn(gone...)).All(ctx)
	if err != nil {
		return nil, fmt.Errorf("load deployments: %w", err)
	}
	byID := make(map[string]*ent.Deployment, len(deps))
	for _, d := range deps {
		byID[d.ID] = d
	}
	for _, id := range gone {
		state := &ctrlv1.DeploymentState{DeploymentId: id}
		if d := byID[id]; d != nil {
			state.Namespace = naming.Namespace(d.WorkspaceID, d.EnvironmentID)
		}
		built[id] = deleteDeployment(state)
	}
	return built, nil
}

// deploymentEvent is the apply (or, when stopped or not reached by its
// rollout yet, delete) of a deployment in the topology's region. A
// topology read without its deployment (d nil: the deployment was
// deleted) is a delete.
func deploymentEvent(t *ent.DeploymentTopology, d *ent.Deployment) *ctrlv1.DeploymentChangeEvent {
	if d == nil {
		return deleteDeployment(&ctrlv1.DeploymentState{DeploymentId: t.DeploymentID})
	}
	return deploymentEventIn(t, naming.Namespace(d.WorkspaceID, d.EnvironmentID))
}

// deploymentEventIn is deploymentEvent of a deployment that is there, whose
// namespace the caller knows.
func deploymentEventIn(t *ent.DeploymentTopology, namespace string) *ctrlv1.DeploymentChangeEvent {
	// Not the workspace and environment IDs: agents place objects by
	// namespace, and every resource sent costs their bytes (state.proto).
	state := &ctrlv1.DeploymentState{DeploymentId: t.DeploymentID, Namespace: namespace}
	if t.DesiredStatus == deploymenttopology.DesiredStatusStopped || t.SpecHash == "" {
		return deleteDeployment(state)
	}
	state.Image = t.Image
	state.Replicas = int32(t.Replicas)
	state.CpuMillicores = int32(t.CPUMillicores)
	state.MemoryMib = int32(t.MemoryMib)
	state.Port = int32(t.Port)
	state.Command = t.Command
	state.Env = t.Env
	state.SpecHash = t.SpecHash
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: state},
	}}
}

func deleteDeployment(state *ctrlv1.DeploymentState) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_DELETE, Deployment: state},
	}}
}
