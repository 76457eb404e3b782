package operator

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/validate"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ListRegions implements ctrlv1.OperatorServiceServer.
func (s *Service) ListRegions(ctx context.Context, _ *ctrlv1.ListRegionsRequest) (*ctrlv1.ListRegionsResponse, error) {
	now, err := s.clock(ctx) // heartbeats are stamped by the database's clock
	if err != nil {
		return nil, s.viewError(err)
	}
	regions, err := regionhealth.Read(ctx, s.client, s.sql, "", now)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.ListRegionsResponse{}
	for _, h := range regions {
		out.Regions = append(out.Regions, overview(h, now))
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
	now, err := s.clock(ctx) // heartbeats are stamped by the database's clock
	if err != nil {
		return nil, s.viewError(err)
	}
	health, err := regionhealth.Read(ctx, s.client, s.sql, req.GetRegion(), now)
	if err != nil {
		return nil, s.viewError(err)
	}
	r := health[0]
	out := &ctrlv1.GetRegionResponse{Overview: overview(r, now)}

	topologies, err := s.client.DeploymentTopology.Query().
		Where(deploymenttopology.Region(r.Region)).
		WithDeployment().Order(ent.Asc(deploymenttopology.FieldDeploymentID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	counts, err := regionhealth.ReadInstances(ctx, s.sql, r.Region)
	if err != nil {
		return nil, s.viewError(err)
	}
	states, err := regionhealth.ReadResources(ctx, s.sql, r)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, t := range topologies {
		if t.Edges.Deployment == nil {
			continue // deleted between the two reads WithDeployment makes (I6)
		}
		d := inRegion(t, counts[regionhealth.InstanceKey{Deployment: t.DeploymentID, Region: r.Region}])
		d.Sync, d.NotInSync = deploymentSync(r, states, d, counts, now)
		out.Deployments = append(out.Deployments, d)
	}
	sentinels, err := s.client.Sentinel.Query().Where(sentinel.Region(r.Region)).Order(ent.Asc(sentinel.FieldID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, x := range sentinels {
		sr := &ctrlv1.SentinelInRegion{
			SentinelId: x.ID, EnvironmentId: x.EnvironmentID, Image: x.Image,
			DesiredState: string(x.DesiredState), Replicas: int32(x.Replicas),
			AvailableReplicas: int32(x.AvailableReplicas), Health: string(x.Health),
		}
		sr.Sync, _ = resourceSync(r, states, regionhealth.ResourceKey{Kind: rpc.KindSentinel, ID: x.ID}, now)
		out.Sentinels = append(out.Sentinels, sr)
	}
	policies, err := s.client.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.Region(r.Region)).
		Order(ent.Asc(ciliumnetworkpolicy.FieldID)).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, p := range policies {
		pr := &ctrlv1.PolicyInRegion{PolicyId: p.ID, Name: p.Name, EnvironmentId: p.EnvironmentID}
		pr.Sync, _ = resourceSync(r, states, regionhealth.ResourceKey{Kind: rpc.KindCiliumNetworkPolicy, ID: p.ID}, now)
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
	now, err := s.clock(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	health, err := regionhealth.ReadBrief(ctx, s.client, s.sql, req.GetRegion(), now)
	if err != nil {
		return nil, s.viewError(err)
	}
	h := health[0]
	changes, err := changelog.InRegion(ctx, s.sql, req.GetRegion(), h.Acked(), h.Head, limit)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.ListPendingChangesResponse{Total: h.LagChanges}
	for _, c := range changes {
		pc := &ctrlv1.PendingChange{
			Version: c.Version, ResourceType: c.Type, ResourceId: c.ResourceID, CreatedAt: timestamppb.New(c.CreatedAt)}
		if kind, ok := kinds.OfChange(c.Type); ok {
			pc.Kind = kind.Name
		}
		out.Changes = append(out.Changes, pc)
	}
	if err := s.describeChanges(ctx, req.GetRegion(), out.Changes); err != nil {
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
	counts, err := regionhealth.ReadInstances(ctx, s.sql, "")
	if err != nil {
		return nil, s.viewError(err)
	}
	now, err := s.clock(ctx) // heartbeats are stamped by the database's clock
	if err != nil {
		return nil, s.viewError(err)
	}
	regions, err := regionhealth.ReadBrief(ctx, s.client, s.sql, "", now)
	if err != nil {
		return nil, s.viewError(err)
	}
	health := map[string]*regionhealth.Health{}
	states := map[string]map[regionhealth.ResourceKey]*regionhealth.ResourceSync{}
	for _, h := range regions {
		health[h.Region] = h
		if states[h.Region], err = regionhealth.ReadResources(ctx, s.sql, h); err != nil {
			return nil, s.viewError(err)
		}
	}
	out := &ctrlv1.ListDeploymentsResponse{}
	for _, d := range deps {
		sum := &ctrlv1.DeploymentSummary{
			DeploymentId: d.ID, WorkspaceId: d.WorkspaceID, EnvironmentId: d.EnvironmentID, Image: d.Image,
			WorkflowStatus: string(d.WorkflowStatus), WorkflowError: d.WorkflowError, CreatedAt: timestamppb.New(d.CreatedAt),
		}
		for _, t := range d.Edges.Topologies {
			t.Edges.Deployment = d
			r := inRegion(t, counts[regionhealth.InstanceKey{Deployment: d.ID, Region: t.Region}])
			if h := health[t.Region]; h != nil {
				r.Sync, r.NotInSync = deploymentSync(h, states[t.Region], r, counts, now)
			}
			sum.Regions = append(sum.Regions, r)
		}
		out.Deployments = append(out.Deployments, sum)
	}
	return out, nil
}

func inRegion(t *ent.DeploymentTopology, c *regionhealth.Instances) *ctrlv1.DeploymentInRegion {
	d := t.Edges.Deployment
	if c == nil {
		c = &regionhealth.Instances{}
	}
	return &ctrlv1.DeploymentInRegion{
		DeploymentId: t.DeploymentID, Region: t.Region, Image: t.Image, DesiredStatus: string(t.DesiredStatus),
		Replicas: int32(t.Replicas), ReadyInstances: c.Ready, Instances: c.Total,
		ActualStatus: string(t.ActualStatus), WorkflowStatus: string(d.WorkflowStatus),
	}
}

// overview is one region's sync health as the console shows it.
func overview(h *regionhealth.Health, now time.Time) *ctrlv1.RegionOverview {
	o := &ctrlv1.RegionOverview{
		Region: h.Region, HeadVersion: h.Head, AckedVersion: h.Acked(), Paused: h.Paused,
		LagChanges: h.LagChanges, PendingResources: h.PendingResources, LagSeconds: h.LagSeconds(now),
		FailingResources: h.FailingResources, NotInSync: syncReasons(h.Why(now)),
	}
	if h.PausedSince != nil {
		o.PausedSince = timestamppb.New(*h.PausedSince)
	}
	a := h.Agent
	if a == nil {
		return o
	}
	o.AgentIdentity = a.Identity
	o.AgentConnected = h.Connected
	o.LastError = a.LastError
	o.LastFullSyncError = a.LastFullSyncError
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
