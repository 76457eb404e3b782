package operator

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// syncReasons is reasons as the API gives them.
func syncReasons(reasons []regionhealth.Reason) []*ctrlv1.SyncReason {
	out := make([]*ctrlv1.SyncReason, 0, len(reasons))
	for _, r := range reasons {
		out = append(out, &ctrlv1.SyncReason{Code: r.Code, Message: r.Message, Since: timeOrNil(r.Since), Resource: r.Resource})
	}
	return out
}

// resourceSync is one resource's sync state as the API gives it, with why
// it is not in sync (nil reasons when it is).
func resourceSync(h *regionhealth.Health, states map[regionhealth.ResourceKey]*regionhealth.ResourceSync, key regionhealth.ResourceKey, now time.Time) (*ctrlv1.ResourceSyncState, []*ctrlv1.SyncReason) {
	st := states[key]
	if st == nil {
		st = &regionhealth.ResourceSync{Pending: h.NoStatePending()}
	}
	out := &ctrlv1.ResourceSyncState{
		Reported: st.Reported, AppliedVersion: st.AppliedVersion, InSync: st.InSync, Error: st.Error,
		FailingSince: timeOrNil(st.FailingSince), ReportedAt: timeOrNil(st.ReportedAt), PendingChanges: st.Pending,
	}
	return out, syncReasons(h.WhyResource(key.String(), st.Pending, st.Failure(key), now))
}

// deploymentSync is resourceSync for a deployment in a region, with why
// its instances there are not ready after why it is not in sync.
func deploymentSync(h *regionhealth.Health, states map[regionhealth.ResourceKey]*regionhealth.ResourceSync, d *ctrlv1.DeploymentInRegion,
	instances map[regionhealth.InstanceKey]*regionhealth.Instances, now time.Time) (*ctrlv1.ResourceSyncState, []*ctrlv1.SyncReason) {
	key := regionhealth.ResourceKey{Kind: rpc.KindDeployment, ID: d.GetDeploymentId()}
	sync, why := resourceSync(h, states, key, now)
	in := instances[regionhealth.InstanceKey{Deployment: d.GetDeploymentId(), Region: d.GetRegion()}]
	return sync, append(why, syncReasons(regionhealth.WhyInstances(key.String(), in))...)
}

func timeOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
