package operator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// UpdateDeployment implements ctrlv1.OperatorServiceServer.
func (s *Service) UpdateDeployment(ctx context.Context, req *ctrlv1.UpdateDeploymentRequest) (*ctrlv1.UpdateDeploymentResponse, error) {
	var revision int
	err := s.act(ctx, "update", req.GetDeploymentId(), req, func(ctx context.Context) (err error) {
		u := desired.SpecUpdate{Image: req.Image, Env: req.GetEnv(), ReplaceEnv: req.GetReplaceEnv()}
		if req.CpuMillicores != nil {
			u.CPUMillicores = ptr(int(req.GetCpuMillicores()))
		}
		if req.MemoryMib != nil {
			u.MemoryMiB = ptr(int(req.GetMemoryMib()))
		}
		revision, err = s.desired.UpdateDeployment(ctx, req.GetDeploymentId(), u)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateDeploymentResponse{Revision: int32(revision)}, nil
}

// RollbackDeployment implements ctrlv1.OperatorServiceServer.
func (s *Service) RollbackDeployment(ctx context.Context, req *ctrlv1.RollbackDeploymentRequest) (*ctrlv1.RollbackDeploymentResponse, error) {
	var revision, restored int
	err := s.act(ctx, "rollback", req.GetDeploymentId(), req, func(ctx context.Context) (err error) {
		revision, restored, err = s.desired.Rollback(ctx, req.GetDeploymentId(), int(req.GetToRevision()))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.RollbackDeploymentResponse{Revision: int32(revision), Restored: int32(restored)}, nil
}

// History list sizes.
const (
	defaultHistoryLimit = 50
	maxHistoryLimit     = 500
)

// GetDeploymentHistory implements ctrlv1.OperatorServiceServer.
func (s *Service) GetDeploymentHistory(ctx context.Context, req *ctrlv1.GetDeploymentHistoryRequest) (*ctrlv1.GetDeploymentHistoryResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > maxHistoryLimit:
		return nil, invalid("limit: must be 0..%d (0 means %d), got %d", maxHistoryLimit, defaultHistoryLimit, limit)
	case limit == 0:
		limit = defaultHistoryLimit
	}
	revisions, before, err := s.desired.History(ctx, req.GetDeploymentId(), limit)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.GetDeploymentHistoryResponse{}
	for i, r := range revisions {
		prev := before // newest first: the one before is the next in the list
		if i+1 < len(revisions) {
			prev = revisions[i+1]
		}
		out.Revisions = append(out.Revisions, revisionMessage(r, desired.Summarize(prev, r)))
	}
	return out, nil
}

// revisionMessage is r as the API shows it: env names, never values.
func revisionMessage(r *ent.DeploymentRevision, summary string) *ctrlv1.DeploymentRevision {
	m := &ctrlv1.DeploymentRevision{
		Revision: int32(r.Revision), Action: r.Action, Actor: r.Actor, CreatedAt: timestamppb.New(r.CreatedAt),
		Summary: summary, FirstVersion: r.FirstVersion, LastVersion: r.LastVersion,
		Image: r.Image, CpuMillicores: int32(r.CPUMillicores), MemoryMib: int32(r.MemoryMib),
		EnvNames: slices.Sorted(maps.Keys(r.Env)),
	}
	for _, region := range slices.Sorted(maps.Keys(r.Regions)) {
		spec := r.Regions[region]
		m.Regions = append(m.Regions, &ctrlv1.RegionSpec{Region: region, Replicas: int32(spec.Replicas), Status: spec.Status})
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// describeChanges fills in what each of a region's pending changes does,
// and who did it where a revision says so: a deployment's change by the
// revision whose versions hold it, compared with the revision before it;
// otherwise (deletes, changes from before revisions, sentinels, policies)
// by the resource's current desired state, or "deleted". One query per
// kind of resource, whatever the number of changes.
func (s *Service) describeChanges(ctx context.Context, region string, changes []*ctrlv1.PendingChange) error {
	byType := map[string][]*ctrlv1.PendingChange{}
	for _, c := range changes {
		byType[c.ResourceType] = append(byType[c.ResourceType], c)
	}
	if err := s.describeDeploymentChanges(ctx, region, byType[deploymentchange.ResourceTypeDeploymentTopology.String()]); err != nil {
		return err
	}
	if cs := byType[deploymentchange.ResourceTypeSentinel.String()]; len(cs) > 0 {
		rows, err := s.client.Sentinel.Query().Where(sentinel.IDIn(resourceIDs(cs)...)).All(ctx)
		if err != nil {
			return fmt.Errorf("read the changes' sentinels: %w", err)
		}
		now := map[string]string{}
		for _, x := range rows {
			now[x.ID] = desired.DescribeState(string(x.DesiredState), x.Replicas, x.Image)
		}
		describeCurrent(cs, now)
	}
	if cs := byType[deploymentchange.ResourceTypeCiliumNetworkPolicy.String()]; len(cs) > 0 {
		rows, err := s.client.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.IDIn(resourceIDs(cs)...)).All(ctx)
		if err != nil {
			return fmt.Errorf("read the changes' policies: %w", err)
		}
		now := map[string]string{}
		for _, p := range rows {
			now[p.ID] = "desired: policy " + p.Name
		}
		describeCurrent(cs, now)
	}
	return nil
}

func (s *Service) describeDeploymentChanges(ctx context.Context, region string, changes []*ctrlv1.PendingChange) error {
	if len(changes) == 0 {
		return nil
	}
	ids := resourceIDs(changes)
	lo, hi := changes[0].Version, changes[0].Version
	for _, c := range changes {
		lo, hi = min(lo, c.Version), max(hi, c.Version)
	}
	covering, err := s.client.DeploymentRevision.Query().
		Where(deploymentrevision.DeploymentIDIn(ids...), deploymentrevision.LastVersionGTE(lo), deploymentrevision.FirstVersionLTE(hi)).
		All(ctx)
	if err != nil {
		return fmt.Errorf("read the changes' revisions: %w", err)
	}
	type key struct {
		deployment string
		revision   int
	}
	var earlier []int
	for _, r := range covering {
		earlier = append(earlier, r.Revision-1)
	}
	previous := map[key]*ent.DeploymentRevision{}
	if len(earlier) > 0 {
		rows, err := s.client.DeploymentRevision.Query().
			Where(deploymentrevision.DeploymentIDIn(ids...), deploymentrevision.RevisionIn(earlier...)).All(ctx)
		if err != nil {
			return fmt.Errorf("read the changes' earlier revisions: %w", err)
		}
		for _, r := range rows {
			previous[key{r.DeploymentID, r.Revision}] = r
		}
	}
	topologies, err := s.client.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentIDIn(ids...), deploymenttopology.Region(region)).
		WithDeployment().All(ctx)
	if err != nil {
		return fmt.Errorf("read the changes' topologies: %w", err)
	}
	now := map[string]string{}
	for _, t := range topologies {
		if d := t.Edges.Deployment; d != nil { // gone since the read of topologies (I6)
			now[t.DeploymentID] = desired.DescribeState(string(t.DesiredStatus), t.Replicas, d.Image)
		}
	}
	describeCurrent(changes, now)
	for _, c := range changes {
		for _, r := range covering {
			if r.DeploymentID == c.ResourceId && r.FirstVersion <= c.Version && c.Version <= r.LastVersion {
				c.Summary = desired.SummarizeRegion(previous[key{r.DeploymentID, r.Revision - 1}], r, region)
				c.Actor = r.Actor
			}
		}
	}
	return nil
}

// describeCurrent sets each change's summary to its resource's current
// desired state in now, or "deleted" when now has none.
func describeCurrent(changes []*ctrlv1.PendingChange, now map[string]string) {
	for _, c := range changes {
		c.Summary = cmp.Or(now[c.ResourceId], "deleted")
	}
}

func resourceIDs(changes []*ctrlv1.PendingChange) []string {
	ids := make([]string, 0, len(changes))
	for _, c := range changes {
		ids = append(ids, c.ResourceId)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
