package operator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/failedspec"
	"github.com/deploysync/deploysync/ent/rollout"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// UpdateDeployment implements ctrlv1.OperatorServiceServer.
func (s *Service) UpdateDeployment(ctx context.Context, req *ctrlv1.UpdateDeploymentRequest) (*ctrlv1.UpdateDeploymentResponse, error) {
	var revision int
	err := s.act(ctx, "update", req.GetDeploymentId(), req, func(ctx context.Context) (err error) {
		if ctx, err = withRollout(ctx, req.GetRollout()); err != nil {
			return err
		}
		if ctx, err = withFleet(ctx, req.GetBreakGlassReason(), req.GetRetryFailedReason()); err != nil {
			return err
		}
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
		if ctx, err = withRollout(ctx, req.GetRollout()); err != nil {
			return err
		}
		if ctx, err = withFleet(ctx, req.GetBreakGlassReason(), req.GetRetryFailedReason()); err != nil {
			return err
		}
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
	failed, err := s.client.FailedSpec.Query().Where(failedspec.DeploymentID(req.GetDeploymentId())).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.GetDeploymentHistoryResponse{}
	for i, r := range revisions {
		prev := before // newest first: the one before is the next in the list
		if i+1 < len(revisions) {
			prev = revisions[i+1]
		}
		m := revisionMessage(r, desired.Summarize(prev, r))
		for _, f := range failed {
			if f.Revision == r.Revision {
				m.Failed, m.FailedRolloutId = f.Reason, int64(f.RolloutID)
			}
		}
		out.Revisions = append(out.Revisions, m)
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
// and who did it where a revision says so: by the resource's current
// desired state in the region, or "deleted"; and a deployment's change by
// the revision whose versions hold it, compared with the revision before
// it, where there is one (deletes and changes from before revisions have
// none). A query per kind of resource, whatever the number of changes.
func (s *Service) describeChanges(ctx context.Context, region string, changes []*ctrlv1.PendingChange) error {
	byType := map[string][]*ctrlv1.PendingChange{}
	for _, c := range changes {
		byType[c.ResourceType] = append(byType[c.ResourceType], c)
	}
	for _, kind := range kinds.All {
		cs := byType[kind.ChangeType]
		if len(cs) == 0 {
			continue
		}
		now, err := kind.Describe(ctx, s.client, region, resourceIDs(cs))
		if err != nil {
			return fmt.Errorf("describe pending %s changes: %w", kind.Name, err)
		}
		for _, c := range cs {
			c.Summary = cmp.Or(now[c.ResourceId], "deleted")
		}
	}
	// Revisions are deployments' alone.
	return s.summarizeFromRevisions(ctx, region, byType[deploymentchange.ResourceTypeDeploymentTopology.String()])
}

// summarizeFromRevisions says what each deployment change does, and who
// made it, where a revision's versions hold it.
func (s *Service) summarizeFromRevisions(ctx context.Context, region string, changes []*ctrlv1.PendingChange) error {
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
	var uncovered []*ctrlv1.PendingChange
	for _, c := range changes {
		covered := false
		for _, r := range covering {
			if r.DeploymentID == c.ResourceId && r.FirstVersion <= c.Version && c.Version <= r.LastVersion {
				c.Summary = desired.SummarizeRegion(previous[key{r.DeploymentID, r.Revision - 1}], r, region)
				c.Actor = r.Actor
				covered = true
			}
		}
		if !covered {
			uncovered = append(uncovered, c)
		}
	}
	return s.summarizeFromRollouts(ctx, region, uncovered)
}

// summarizeFromRollouts says what the deployment changes a rollout's step
// wrote do: a later wave's promotion is no operator action of its own, so
// no revision holds it. A step updates its rollout's row when it writes
// the change, so the rollouts read are those updated since the oldest of
// the changes.
func (s *Service) summarizeFromRollouts(ctx context.Context, region string, changes []*ctrlv1.PendingChange) error {
	if len(changes) == 0 {
		return nil
	}
	oldest := changes[0].GetCreatedAt().AsTime()
	for _, c := range changes {
		if t := c.GetCreatedAt().AsTime(); t.Before(oldest) {
			oldest = t
		}
	}
	rollouts, err := s.client.Rollout.Query().
		Where(rollout.DeploymentIDIn(resourceIDs(changes)...), rollout.UpdatedAtGTE(oldest.Add(-time.Second))).All(ctx)
	if err != nil {
		return fmt.Errorf("read the changes' rollouts: %w", err)
	}
	for _, c := range changes {
		for _, r := range rollouts {
			if st, ok := r.Regions[region]; ok && r.DeploymentID == c.ResourceId && st.Version == c.Version {
				c.Summary = desired.SummarizePromotion(r, region)
				c.Actor = desired.RolloutActor
			}
		}
	}
	return nil
}

func resourceIDs(changes []*ctrlv1.PendingChange) []string {
	ids := make([]string, 0, len(changes))
	for _, c := range changes {
		ids = append(ids, c.ResourceId)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
