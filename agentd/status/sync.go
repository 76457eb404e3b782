package status

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxSyncErrorBytes clips a resource's apply error in a report, half of
// what the API allows: one report carries up to 500 resources, and one
// resource's long error must not make reports large.
const maxSyncErrorBytes = limits.MaxErrorBytes / 2

// SyncReporter sends each resource's apply state (ReportResourceSync) as
// the dispatcher tracks it: what changed since ctrld last took a report,
// at most maxPerReport resources per call.
type SyncReporter struct {
	client   ctrlv1.ClusterServiceClient
	region   string
	source   *dispatch.Dispatcher
	interval time.Duration
	log      *slog.Logger
}

// NewSyncReporter returns a SyncReporter sending at most every interval.
func NewSyncReporter(client ctrlv1.ClusterServiceClient, region string, source *dispatch.Dispatcher, interval time.Duration, log *slog.Logger) *SyncReporter {
	if interval <= 0 {
		interval = time.Second
	}
	return &SyncReporter{client: client, region: region, source: source, interval: interval, log: log}
}

// Run reports until ctx ends.
func (r *SyncReporter) Run(ctx context.Context) {
	every(ctx, r.interval, r.log, "resource sync", r.flush)
}

// flush sends what changed. What ctrld did not take is reported by the
// next flush, whether the send failed or something on the way panicked;
// except a report ctrld refused as invalid: sent again it would be
// refused again, and hold up every report after it for good.
func (r *SyncReporter) flush(ctx context.Context) error {
	syncs := r.source.Syncs()
	sent := 0 // syncs[:sent] are reported
	defer func() { r.source.Unreported(syncs[sent:]) }()
	for sent < len(syncs) {
		batch := syncs[sent:min(len(syncs), sent+maxPerReport)]
		if err := r.send(ctx, batch); err != nil {
			return err
		}
		r.source.Reported(batch)
		sent += len(batch)
	}
	return nil
}

// send reports batch; it fails only when sending it again may succeed.
func (r *SyncReporter) send(ctx context.Context, batch []dispatch.Sync) error {
	req := &ctrlv1.ReportResourceSyncRequest{Region: r.region, Resources: make([]*ctrlv1.ResourceSync, 0, len(batch))}
	for _, s := range batch {
		// ctrld refuses a whole report over one ID it could never hold
		// (garbage collection deletes whatever carries the managed label,
		// say an object labelled by hand): no such resource is desired,
		// so leaving it out loses nothing.
		if validate.ID(s.Key.ID) == nil {
			req.Resources = append(req.Resources, resourceSync(s))
		}
	}
	if len(req.Resources) == 0 {
		return nil
	}
	_, err := r.client.ReportResourceSync(ctx, req)
	if grpcstatus.Code(err) == codes.InvalidArgument {
		r.log.Error("resource sync: ctrld refused a report as invalid; dropping it (its resources are reported again when they change)",
			"err", err, "resources", len(req.Resources))
		return nil
	}
	if err != nil {
		return fmt.Errorf("report %d resources' sync: %w", len(req.Resources), err)
	}
	return nil
}

func resourceSync(s dispatch.Sync) *ctrlv1.ResourceSync {
	rs := &ctrlv1.ResourceSync{
		Kind: s.Key.Kind, ResourceId: s.Key.ID, AppliedVersion: s.AppliedVersion, ReceivedVersion: s.ReceivedVersion,
		InSync: s.InSync, Deleted: s.Deleted,
		Error: validate.Text(s.Err, maxSyncErrorBytes),
	}
	if !s.FailingSince.IsZero() {
		rs.FailingSince = timestamppb.New(s.FailingSince)
	}
	return rs
}
