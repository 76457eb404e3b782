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
// topology row with its spec and namespace, from the topology table alone,
// in the order of the topology's own ID, which the region index orders
// (read as a range, regionIndex). Topologies with no spec yet are not
// listed.
var pageStatement = `SELECT t.id, t.deployment_id, t.replicas, t.namespace, t.image,
		t.cpu_millicores, t.memory_mib, t.port, t.command, t.env, t.spec_hash
		FROM deployment_topology t FORCE INDEX (` + regionIndex(migrate.DeploymentTopologyTable) + `)
		WHERE t.region = ? AND t.desired_status = ? AND t.id > ? AND t.spec_hash <> ''
		ORDER BY t.id LIMIT ?`

// pageDeployments pages by the topology row's own ID; the key is that ID
// as text. One statement of one table (a consistent snapshot by itself):
// the topology holds its deployment's namespace, and its foreign key
// (ON DELETE CASCADE) means no snapshot shows a topology whose deployment
// is gone. Joined with deployments for the namespace, as it was, the
// database spent twice the CPU on a page (issue 29). Only a topology an
// older ctrld wrote, which has no namespace until `ctrld migrate` fills
// it, takes its deployment's, read with one more statement for the page
// (gone meanwhile: a delete, I6).
//
// A full sync reads every deployment of the region through here, so a row
// costs what its event keeps and little more: the columns are scanned into
// the same variables row after row, text the event does not keep is read
// in place (sql.RawBytes), and equal namespaces are one string a page.
// Allocating all of it afresh for each row was half of the page's CPU.
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
		t                       ent.DeploymentTopology
		namespace, command, env sql.RawBytes
		// Integers as the driver gives them (int64), converted here:
		// database/sql converts into an int by reflection, or by way of
		// text into sql.RawBytes, a tenth of the page's CPU.
		id, replicas, cpu, memory, port any
		namespaces                      = map[string]string{}
		unplaced                        []*ctrlv1.DeploymentState // no namespace in the row
	)
	columns := []any{&id, &t.DeploymentID, &replicas, &namespace,
		&t.Image, &cpu, &memory, &port, &command, &env, &t.SpecHash}
	integers := [...]struct {
		value *any
		into  *int
	}{{&id, &t.ID}, {&replicas, &t.Replicas}, {&cpu, &t.CPUMillicores}, {&memory, &t.MemoryMib}, {&port, &t.Port}}
	events := make([]Event, 0, min(limit, 1024))
	for rows.Next() {
		// Command and env are decoded into fresh values: the last row's
		// event holds its own.
		t = ent.DeploymentTopology{DesiredStatus: deploymenttopology.DesiredStatusRunning}
		if err := rows.Scan(columns...); err != nil {
			return nil, after, fmt.Errorf("read a page of deployments: %w", err)
		}
		for _, c := range integers {
			n, err := integer(*c.value)
			if err != nil {
				return nil, after, fmt.Errorf("read a page of deployments: %w", err)
			}
			*c.into = n
		}
		if err := unmarshalIfSet(command, &t.Command); err != nil {
			return nil, after, fmt.Errorf("deployment %s: command: %w", t.DeploymentID, err)
		}
		if err := unmarshalIfSet(env, &t.Env); err != nil {
			return nil, after, fmt.Errorf("deployment %s: env: %w", t.DeploymentID, err)
		}
		ns, ok := namespaces[string(namespace)] // no allocation to look up
		if !ok {
			ns = string(namespace)
			namespaces[ns] = ns
		}
		ev := deploymentEventIn(&t, ns)
		if ns == "" {
			unplaced = append(unplaced, ev.GetDeployment().GetDeployment())
		}
		events = append(events, Event{t.DeploymentID, ev})
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read a page of deployments: %w", err)
	}
	if len(events) == 0 {
		return nil, after, nil
	}
	if len(unplaced) > 0 {
		if err := placeUnplaced(ctx, c, events, unplaced); err != nil {
			return nil, after, err
		}
	}
	return events, strconv.Itoa(t.ID), nil
}

// placeUnplaced gives the states of a page that their topologies gave no
// namespace (rows from a ctrld older than the column) their deployments'
// namespace, and turns those whose deployment is gone (deleted since the
// page was read, I6) into deletes.
func placeUnplaced(ctx context.Context, c *ent.Client, events []Event, unplaced []*ctrlv1.DeploymentState) error {
	ids := make([]string, len(unplaced))
	for i, s := range unplaced {
		ids[i] = s.DeploymentId
	}
	deps, err := c.Deployment.Query().Where(deployment.IDIn(ids...)).
		Select(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID).All(ctx)
	if err != nil {
		return fmt.Errorf("read the namespaces of a page of deployments: %w", err)
	}
	byID := make(map[string]string, len(deps))
	for _, d := range deps {
		byID[d.ID] = naming.Namespace(d.WorkspaceID, d.EnvironmentID)
	}
	for _, s := range unplaced {
		s.Namespace = byID[s.DeploymentId]
	}
	for i, e := range events {
		if s := e.Event.GetDeployment().GetDeployment(); s.GetNamespace() == "" {
			events[i].Event = deleteDeployment(&ctrlv1.DeploymentState{DeploymentId: s.GetDeploymentId()})
		}
	}
	return nil
}

// integer is an integer column's value as the driver gives it: an int64,
// or its decimal text.
func integer(v any) (int, error) {
	switch v := v.(type) {
	case int64:
		return int(v), nil
	case []byte:
		return strconv.Atoi(string(v))
	}
	return 0, fmt.Errorf("an integer column read as %T", v)
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
