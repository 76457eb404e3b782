package cluster

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/resourcesync"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxResourcesPerSyncReport bounds one ReportResourceSync; agents send
// at most 500.
const maxResourcesPerSyncReport = 500

// syncKey names one resource of the reporting region.
type syncKey struct {
	kind resourcesync.Kind
	id   string
}

// ReportResourceSync implements ctrlv1.ClusterServiceServer: each listed
// resource's sync state replaces the stored one. Reports on resources the
// region does not desire are ignored (deleted meanwhile, or never desired
// here), so the table holds at most a row per desired resource; a reported
// delete removes the row.
func (s *Service) ReportResourceSync(ctx context.Context, req *ctrlv1.ReportResourceSyncRequest) (*ctrlv1.ReportResourceSyncResponse, error) {
	region := req.GetRegion()
	if err := checkRegion(ctx, region); err != nil {
		return nil, err
	}
	if len(req.GetResources()) > maxResourcesPerSyncReport {
		return nil, status.Errorf(codes.InvalidArgument, "resources: at most %d per report", maxResourcesPerSyncReport)
	}
	now := time.Now().UTC()
	newest, err := changelog.NewestVersion(ctx, s.db)
	if err != nil {
		return nil, internal(s.log, "report resource sync", err)
	}
	seen := map[syncKey]bool{}
	for i, r := range req.GetResources() {
		k, err := checkResourceSync(r, newest, now)
		if err == nil && seen[k] {
			err = fmt.Errorf("%s/%s is listed twice", k.kind, k.id)
		}
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "resources[%d].%v", i, err)
		}
		seen[k] = true
	}
	// Grouped by kind: a statement per kind, not one per resource.
	reported, deleted := map[resourcesync.Kind][]string{}, map[resourcesync.Kind][]string{}
	for _, r := range req.GetResources() {
		kind := resourcesync.Kind(r.GetKind())
		if r.GetDeleted() {
			deleted[kind] = append(deleted[kind], r.GetResourceId())
		} else {
			reported[kind] = append(reported[kind], r.GetResourceId())
		}
	}
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		for kind, ids := range deleted {
			if _, err := tx.ResourceSync.Delete().Where(resourcesync.Region(region),
				resourcesync.KindEQ(kind), resourcesync.ResourceIDIn(ids...)).Exec(ctx); err != nil {
				return fmt.Errorf("forget deleted %s resources: %w", kind, err)
			}
		}
		desired, err := desiredHere(ctx, tx, region, reported)
		if err != nil {
			return err
		}
		var upserts []*ent.ResourceSyncCreate
		for _, r := range req.GetResources() {
			k := syncKey{resourcesync.Kind(r.GetKind()), r.GetResourceId()}
			if r.GetDeleted() || !desired[k] {
				continue
			}
			create := tx.ResourceSync.Create().SetRegion(region).SetKind(k.kind).SetResourceID(k.id).
				SetAppliedVersion(r.GetAppliedVersion()).SetReceivedVersion(r.GetReceivedVersion()).
				SetInSync(r.GetInSync()).SetError(r.GetError()).
				SetReportedAt(now)
			if ts := r.GetFailingSince(); ts != nil && r.GetError() != "" {
				create.SetFailingSince(ts.AsTime().UTC())
			}
			upserts = append(upserts, create)
		}
		if len(upserts) == 0 {
			return nil
		}
		// One statement for the whole report. failing_since is cleared
		// explicitly: an upsert's new values leave out what a create did
		// not set.
		return tx.ResourceSync.CreateBulk(upserts...).
			OnConflictColumns(resourcesync.FieldRegion, resourcesync.FieldKind, resourcesync.FieldResourceID).
			Update(func(u *ent.ResourceSyncUpsert) {
				u.UpdateAppliedVersion().UpdateReceivedVersion().UpdateInSync().UpdateError().UpdateReportedAt().UpdateFailingSince()
			}).Exec(ctx)
	})
	if err != nil {
		return nil, internal(s.log, "report resource sync", err)
	}
	if s.cfg.Reported != nil {
		s.cfg.Reported()
	}
	return &ctrlv1.ReportResourceSyncResponse{}, nil
}

// checkResourceSync validates one reported resource and names it.
func checkResourceSync(r *ctrlv1.ResourceSync, newest uint64, now time.Time) (syncKey, error) {
	k := syncKey{resourcesync.Kind(r.GetKind()), r.GetResourceId()}
	if err := resourcesync.KindValidator(k.kind); err != nil {
		return k, fmt.Errorf("kind: %q is not deployment, sentinel or cilium_network_policy", r.GetKind())
	}
	if err := validate.ID(k.id); err != nil {
		return k, fmt.Errorf("resource_id: %v", err)
	}
	for _, f := range []struct {
		field string
		v     uint64
	}{{"applied_version", r.GetAppliedVersion()}, {"received_version", r.GetReceivedVersion()}} {
		switch field, v := f.field, f.v; {
		case v > math.MaxInt64:
			return k, fmt.Errorf("%s: %d is not below 2^63", field, v)
		case v > newest:
			return k, fmt.Errorf("%s: %d is ahead of the newest version issued, %d", field, v, newest)
		}
	}
	if len(r.GetError()) > limits.MaxErrorBytes {
		return k, fmt.Errorf("error: at most %d bytes", limits.MaxErrorBytes)
	}
	if err := checkTime(r.GetFailingSince(), now); err != nil {
		return k, fmt.Errorf("failing_since: %v", err)
	}
	return k, nil
}

// desiredHere returns which of the resources ids (by kind) the region
// desires: only those take an agent's report.
func desiredHere(ctx context.Context, tx *ent.Tx, region string, ids map[resourcesync.Kind][]string) (map[syncKey]bool, error) {
	here := map[syncKey]bool{}
	for _, kind := range kinds.All {
		list := ids[resourcesync.Kind(kind.Name)]
		if len(list) == 0 {
			continue
		}
		found, err := kind.Desired(ctx, tx.Client(), region, list)
		if err != nil {
			return nil, fmt.Errorf("which reported %s resources are desired: %w", kind.Name, err)
		}
		for _, id := range found {
			here[syncKey{resourcesync.Kind(kind.Name), id}] = true
		}
	}
	return here, nil
}
