package kinds

import (
	"context"
	"fmt"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/migrate"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// sentinels are an environment's sentinel in one region.
var sentinels = Kind{
	Name:       rpc.KindSentinel,
	ChangeType: deploymentchange.ResourceTypeSentinel.String(),
	Page:       pageSentinels,
	Load: func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]*ctrlv1.DeploymentChangeEvent, error) {
		rows, err := c.Sentinel.Query().Where(sentinel.IDIn(ids...), sentinel.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("load sentinels: %w", err)
		}
		built := make(map[string]*ctrlv1.DeploymentChangeEvent, len(ids))
		for _, s := range rows {
			built[s.ID] = sentinelEvent(s)
		}
		for _, id := range ids {
			if built[id] == nil {
				built[id] = deleteSentinel(&ctrlv1.SentinelState{SentinelId: id})
			}
		}
		return built, nil
	},
	Desired: func(ctx context.Context, c *ent.Client, region string, ids []string) ([]string, error) {
		return c.Sentinel.Query().Where(sentinel.Region(region), sentinel.IDIn(ids...)).IDs(ctx)
	},
	Describe: func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]string, error) {
		rows, err := c.Sentinel.Query().Where(sentinel.IDIn(ids...), sentinel.Region(region)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the sentinels: %w", err)
		}
		now := map[string]string{}
		for _, x := range rows {
			now[x.ID] = DescribeState(string(x.DesiredState), x.Replicas, x.Image)
		}
		return now, nil
	},
	DesiredSQL: "SELECT 1 FROM sentinels d WHERE d.id = s.resource_id AND d.region = s.region",
}

// sentinelPageStatement reads a page of a region's running sentinels in
// ID order, through the region index read as a range (regionIndex).
var sentinelPageStatement = `SELECT id, workspace_id, environment_id, image, replicas, cpu_millicores, memory_mib
		FROM sentinels FORCE INDEX (` + regionIndex(migrate.SentinelsTable) + `)
		WHERE region = ? AND desired_state = ? AND id > ?
		ORDER BY id LIMIT ?`

// pageSentinels pages by the sentinel's ID, which is the key.
func pageSentinels(ctx context.Context, c *ent.Client, region, after string, limit int) ([]Event, string, error) {
	rows, err := c.QueryContext(ctx, sentinelPageStatement, region, sentinel.DesiredStateRunning, after, limit)
	if err != nil {
		return nil, after, fmt.Errorf("read a page of sentinels: %w", err)
	}
	defer rows.Close()
	var events []Event
	last := after
	for rows.Next() {
		s := &ent.Sentinel{Region: region, DesiredState: sentinel.DesiredStateRunning}
		if err := rows.Scan(&s.ID, &s.WorkspaceID, &s.EnvironmentID, &s.Image, &s.Replicas, &s.CPUMillicores, &s.MemoryMib); err != nil {
			return nil, after, fmt.Errorf("read a page of sentinels: %w", err)
		}
		events = append(events, Event{s.ID, sentinelEvent(s)})
		last = s.ID
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read a page of sentinels: %w", err)
	}
	return events, last, nil
}

func sentinelEvent(s *ent.Sentinel) *ctrlv1.DeploymentChangeEvent {
	state := &ctrlv1.SentinelState{
		SentinelId: s.ID,
		Namespace:  naming.Namespace(s.WorkspaceID, s.EnvironmentID),
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
