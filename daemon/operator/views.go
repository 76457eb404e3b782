package operator

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// heartbeatTimeout: an agent that has not reported for this long counts
// as disconnected even if a ctrld still lists its stream (that ctrld may
// have died without recording the disconnect). Agents report every 10s.
const heartbeatTimeout = 30 * time.Second

// ListRegions implements ctrlv1.OperatorServiceServer.
func (s *Service) ListRegions(ctx context.Context, _ *ctrlv1.ListRegionsRequest) (*ctrlv1.ListRegionsResponse, error) {
	regions, err := s.client.Region.Query().All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	heads, err := s.heads(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	agents, err := s.agents(ctx, "")
	if err != nil {
		return nil, s.viewError(err)
	}
	now := time.Now()
	out := &ctrlv1.ListRegionsResponse{}
	for _, r := range regions {
		out.Regions = append(out.Regions, overview(r, heads[r.ID], agents, now))
	}
	if err := s.fillLag(ctx, now, out.Regions...); err != nil {
		return nil, s.viewError(err)
	}
	slices.SortFunc(out.Regions, func(a, b *ctrlv1.RegionOverview) int {
		return cmp.Or(
			cmp.Compare(b.LagSeconds, a.LagSeconds),
			cmp.Compare(b.LagChanges, a.LagChanges),
			cmp.Compare(a.Region, b.Region),
		)
	})
	return out, nil
}

// GetRegion implements ctrlv1.OperatorServiceServer.
func (s *Service) GetRegion(ctx context.Context, req *ctrlv1.GetRegionRequest) (*ctrlv1.GetRegionResponse, error) {
	if err := validate.Region(req.GetRegion()); err != nil {
		return nil, invalid("region: %v", err)
	}
	r, err := s.client.Region.Get(ctx, req.GetRegion())
	if err != nil {
		return nil, s.viewError(err)
	}
	var head uint64
	if err := s.sql.QueryRowContext(ctx, "SELECT COALESCE(MAX(pk), 0) FROM deployment_changes WHERE region = ?", r.ID).Scan(&head); err != nil {
		return nil, s.viewError(err)
	}
	agents, err := s.agents(ctx, r.ID)
	if err != nil {
		return nil, s.viewError(err)
	}
	now := time.Now()
	o := overview(r, head, agents, now)
	if err := s.fillLag(ctx, now, o); err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.GetRegionResponse{Overview: o}

	topologies, err := s.client.DeploymentTopology.Query().
		Where(deploymenttopology.Region(r.ID)).
		WithDeployment().Order(ent.Asc(deploymenttopology.FieldDeploymentID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	counts, err := s.instanceCounts(ctx, r.ID)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, t := range topologies {
		out.Deployments = append(out.Deployments, inRegion(t, counts[countKey{t.DeploymentID, r.ID}]))
	}
	sentinels, err := s.client.Sentinel.Query().Where(sentinel.Region(r.ID)).Order(ent.Asc(sentinel.FieldID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, x := range sentinels {
		out.Sentinels = append(out.Sentinels, &ctrlv1.SentinelInRegion{
			SentinelId: x.ID, EnvironmentId: x.EnvironmentID, Image: x.Image,
			DesiredState: string(x.DesiredState), Replicas: int32(x.Replicas),
			AvailableReplicas: int32(x.AvailableReplicas), Health: string(x.Health),
		})
	}
	policies, err := s.client.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.Region(r.ID)).
		Order(ent.Asc(ciliumnetworkpolicy.FieldID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, p := range policies {
		pr := &ctrlv1.PolicyInRegion{PolicyId: p.ID, Name: p.Name, EnvironmentId: p.EnvironmentID}
		if p.DeploymentID != nil {
			pr.DeploymentId = *p.DeploymentID
		}
		out.Policies = append(out.Policies, pr)
	}
	return out, nil
}

// ListPendingChanges implements ctrlv1.OperatorServiceServer.
func (s *Service) ListPendingChanges(ctx context.Context, req *ctrlv1.ListPendingChangesRequest) (*ctrlv1.ListPendingChangesResponse, error) {
	if err := validate.Region(req.GetRegion()); err != nil {
		return nil, invalid("region: %v", err)
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > 1000:
		return nil, invalid("limit: must be 0..1000")
	case limit == 0:
		limit = 100
	}
	if _, err := s.client.Region.Get(ctx, req.GetRegion()); err != nil {
		return nil, s.viewError(err)
	}
	acked, err := s.ackedCursor(ctx, req.GetRegion())
	if err != nil {
		return nil, s.viewError(err)
	}
	changes, err := tailer.ReadChanges(ctx, s.sql, "WHERE region = ? AND pk > ? ORDER BY pk LIMIT ?", req.GetRegion(), acked, limit)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.ListPendingChangesResponse{}
	for _, c := range changes {
		out.Changes = append(out.Changes, &ctrlv1.PendingChange{
			Version: c.Version, ResourceType: c.Type, ResourceId: c.ResourceID, CreatedAt: timestamppb.New(c.CreatedAt)})
	}
	err = s.sql.QueryRowContext(ctx, "SELECT COUNT(*) FROM deployment_changes WHERE region = ? AND pk > ?", req.GetRegion(), acked).Scan(&out.Total)
	if err != nil {
		return nil, s.viewError(err)
	}
	return out, nil
}

// ListDeployments implements ctrlv1.OperatorServiceServer.
func (s *Service) ListDeployments(ctx context.Context, _ *ctrlv1.ListDeploymentsRequest) (*ctrlv1.ListDeploymentsResponse, error) {
	deps, err := s.client.Deployment.Query().
		WithTopologies(func(q *ent.DeploymentTopologyQuery) { q.Order(ent.Asc(deploymenttopology.FieldRegion)) }).
		Order(ent.Desc(deployment.FieldCreatedAt), ent.Asc(deployment.FieldID)).
		Limit(1000).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	counts, err := s.instanceCounts(ctx, "")
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.ListDeploymentsResponse{}
	for _, d := range deps {
		sum := &ctrlv1.DeploymentSummary{
			DeploymentId: d.ID, WorkspaceId: d.WorkspaceID, EnvironmentId: d.EnvironmentID, Image: d.Image,
			WorkflowStatus: string(d.WorkflowStatus), WorkflowError: d.WorkflowError, CreatedAt: timestamppb.New(d.CreatedAt),
		}
		for _, t := range d.Edges.Topologies {
			t.Edges.Deployment = d
			sum.Regions = append(sum.Regions, inRegion(t, counts[countKey{d.ID, t.Region}]))
		}
		out.Deployments = append(out.Deployments, sum)
	}
	return out, nil
}

type countKey struct{ deployment, region string }

type instanceCount struct{ total, ready int32 }

// instanceCounts counts instances per (deployment, region), in one region
// or (region "") all.
func (s *Service) instanceCounts(ctx context.Context, region string) (map[countKey]instanceCount, error) {
	q := "SELECT deployment_id, region, COUNT(*), SUM(ready AND status = 'running') FROM instances"
	var args []any
	if region != "" {
		q += " WHERE region = ?"
		args = append(args, region)
	}
	rows, err := s.sql.QueryContext(ctx, q+" GROUP BY deployment_id, region", args...)
	if err != nil {
		return nil, fmt.Errorf("count instances: %w", err)
	}
	defer rows.Close()
	out := map[countKey]instanceCount{}
	for rows.Next() {
		var k countKey
		var c instanceCount
		if err := rows.Scan(&k.deployment, &k.region, &c.total, &c.ready); err != nil {
			return nil, err
		}
		out[k] = c
	}
	return out, rows.Err()
}

func inRegion(t *ent.DeploymentTopology, c instanceCount) *ctrlv1.DeploymentInRegion {
	d := t.Edges.Deployment
	return &ctrlv1.DeploymentInRegion{
		DeploymentId: t.DeploymentID, Region: t.Region, Image: d.Image, DesiredStatus: string(t.DesiredStatus),
		Replicas: int32(t.Replicas), ReadyInstances: c.ready, Instances: c.total,
		ActualStatus: string(t.ActualStatus), WorkflowStatus: string(d.WorkflowStatus),
	}
}

// heads returns each region's newest change version.
func (s *Service) heads(ctx context.Context) (map[string]uint64, error) {
	rows, err := s.sql.QueryContext(ctx, "SELECT region, MAX(pk) FROM deployment_changes WHERE region <> '' GROUP BY region")
	if err != nil {
		return nil, fmt.Errorf("read head versions: %w", err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var region string
		var head uint64
		if err := rows.Scan(&region, &head); err != nil {
			return nil, err
		}
		out[region] = head
	}
	return out, rows.Err()
}

// ackedCursor is what the agent that speaks for the region (see pickAgent)
// has applied up to; 0 without one.
func (s *Service) ackedCursor(ctx context.Context, region string) (uint64, error) {
	agents, err := s.agents(ctx, region)
	if err != nil {
		return 0, err
	}
	if a := pickAgent(agents, region, time.Now()); a != nil {
		return a.AckedCursor, nil
	}
	return 0, nil
}

// agents reads the agent records of one region, or (region "") all, with
// what the views show of them. Not through Ent: Ent scans an unsigned
// column through int64, so a single acked_cursor at or above 2^63 (intake
// refuses one, but a row written before that, or by hand, may hold it)
// would fail every view for everyone.
func (s *Service) agents(ctx context.Context, region string) ([]*ent.Agent, error) {
	q := "SELECT region, identity, acked_cursor, last_heartbeat, last_full_sync, last_error, connected_to, connected_since FROM agents"
	var args []any
	if region != "" {
		q += " WHERE region = ?"
		args = append(args, region)
	}
	rows, err := s.sql.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read agent records: %w", err)
	}
	defer rows.Close()
	var out []*ent.Agent
	for rows.Next() {
		a := &ent.Agent{}
		var heartbeat, fullSync, connectedSince sql.NullTime
		if err := rows.Scan(&a.Region, &a.Identity, &a.AckedCursor, &heartbeat, &fullSync, &a.LastError, &a.ConnectedTo, &connectedSince); err != nil {
			return nil, fmt.Errorf("read agent records: %w", err)
		}
		a.LastHeartbeat, a.LastFullSync, a.ConnectedSince = timeOrNil(heartbeat), timeOrNil(fullSync), timeOrNil(connectedSince)
		out = append(out, a)
	}
	return out, rows.Err()
}

func timeOrNil(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func pickAgent(agents []*ent.Agent, region string, now time.Time) *ent.Agent {
	var best *ent.Agent
	score := func(a *ent.Agent) (bool, time.Time) {
		var hb time.Time
		if a.LastHeartbeat != nil {
			hb = *a.LastHeartbeat
		}
		return connected(a, now), hb
	}
	for _, a := range agents {
		if a.Region != region {
			continue
		}
		if best == nil {
			best = a
			continue
		}
		ac, ah := score(a)
		bc, bh := score(best)
		if (ac && !bc) || (ac == bc && ah.After(bh)) {
			best = a
		}
	}
	return best
}

func connected(a *ent.Agent, now time.Time) bool {
	return a.ConnectedTo != "" && a.LastHeartbeat != nil && now.Sub(*a.LastHeartbeat) < heartbeatTimeout
}

// overview is one region's sync health as its agent records tell it;
// fillLag adds the lag.
func overview(r *ent.Region, head uint64, agents []*ent.Agent, now time.Time) *ctrlv1.RegionOverview {
	o := &ctrlv1.RegionOverview{Region: r.ID, HeadVersion: head, Paused: r.Paused}
	a := pickAgent(agents, r.ID, now)
	if a == nil {
		return o
	}
	o.AckedVersion = a.AckedCursor
	o.AgentIdentity = a.Identity
	o.AgentConnected = connected(a, now)
	o.LastError = a.LastError
	if a.ConnectedSince != nil && o.AgentConnected {
		o.ConnectedSince = timestamppb.New(*a.ConnectedSince)
	}
	if a.LastHeartbeat != nil {
		o.LastHeartbeat = timestamppb.New(*a.LastHeartbeat)
	}
	if a.LastFullSync != nil {
		o.LastFullSync = timestamppb.New(*a.LastFullSync)
	}
	return o
}

// fillLag counts the unacked changes, distinct pending resources and the
// oldest change's age of every region behind its head, in one query (an
// index range per region) however many regions there are.
func (s *Service) fillLag(ctx context.Context, now time.Time, overviews ...*ctrlv1.RegionOverview) error {
	behind := map[string]*ctrlv1.RegionOverview{}
	var where []string
	var args []any
	for _, o := range overviews {
		if o.HeadVersion > o.AckedVersion {
			behind[o.Region] = o
			where = append(where, "(region = ? AND pk > ?)")
			args = append(args, o.Region, o.AckedVersion)
		}
	}
	if len(behind) == 0 {
		return nil
	}
	rows, err := s.sql.QueryContext(ctx,
		"SELECT region, COUNT(*), COUNT(DISTINCT resource_type, resource_id), MIN(created_at) FROM deployment_changes WHERE "+
			strings.Join(where, " OR ")+" GROUP BY region", args...)
	if err != nil {
		return fmt.Errorf("compute lag: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var region string
		var changes, resources int64
		var oldest sql.NullTime
		if err := rows.Scan(&region, &changes, &resources, &oldest); err != nil {
			return err
		}
		o := behind[region]
		if o == nil {
			continue
		}
		o.LagChanges, o.PendingResources = changes, resources
		if oldest.Valid {
			o.LagSeconds = max(0, now.Sub(oldest.Time).Seconds())
		}
	}
	return rows.Err()
}

// viewError answers a failed read like toStatus does, and logs a failure
// that is not the caller's (the database's, say): the caller is told ctrld
// logged the cause, so it must have.
func (s *Service) viewError(err error) error {
	st := toStatus(err)
	if c := status.Code(st); c == codes.Unavailable || c == codes.Aborted {
		s.log.Error("operator: a view failed", "err", err)
	}
	return st
}
