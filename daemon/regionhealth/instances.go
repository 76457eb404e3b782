package regionhealth

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// ReasonInstancesNotReady is the reason code of a deployment whose
// instances in a region are not ready for a reason their agent reports
// (CrashLoopBackOff, ImagePullBackOff, ErrImagePull, OOMKilled,
// Unschedulable, or Kubernetes' other words for it). Unlike the other
// codes it says nothing about delivery: the change reached the cluster,
// and what it runs does not come up.
const ReasonInstancesNotReady = "instances_not_ready"

// InstanceKey names a deployment in a region.
type InstanceKey struct{ Deployment, Region string }

// Instances is how a deployment's instances in a region stand, as their
// agent last reported them.
type Instances struct {
	// Total counts the instances reported, Ready those running and ready.
	Total, Ready int32
	// NotReady counts the instances that are not ready by the reason their
	// agent gives, most instances first; those without a reason are not
	// counted here.
	NotReady []NotReady
}

// NotReady is the instances of one deployment in one region that are not
// ready for one reason.
type NotReady struct {
	Reason    string
	Instances int32
	// Restarts sums the restarts of those instances' containers.
	Restarts int64
}

// ReadInstances reads how the deployments' instances stand, per deployment
// and region, in one region or (region "") all: one grouped query, which
// the views run on every refresh.
func ReadInstances(ctx context.Context, db *sql.DB, region string) (map[InstanceKey]*Instances, error) {
	q := `SELECT deployment_id, region, reason, COUNT(*), COALESCE(SUM(ready AND status = 'running'), 0), COALESCE(SUM(restarts), 0)
		FROM instances`
	var args []any
	if region != "" {
		q += " WHERE region = ?"
		args = append(args, region)
	}
	rows, err := db.QueryContext(ctx, q+" GROUP BY deployment_id, region, reason", args...)
	if err != nil {
		return nil, fmt.Errorf("read instances: %w", err)
	}
	defer rows.Close()
	out := map[InstanceKey]*Instances{}
	for rows.Next() {
		var k InstanceKey
		var reason string
		var n, ready int32
		var restarts int64
		if err := rows.Scan(&k.Deployment, &k.Region, &reason, &n, &ready, &restarts); err != nil {
			return nil, fmt.Errorf("read instances: %w", err)
		}
		in := out[k]
		if in == nil {
			in = &Instances{}
			out[k] = in
		}
		in.Total += n
		in.Ready += ready
		// A ready instance has no reason (its agent sends none); any that
		// do not count as not ready.
		if reason != "" && n > ready {
			in.NotReady = append(in.NotReady, NotReady{Reason: reason, Instances: n - ready, Restarts: restarts})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read instances: %w", err)
	}
	for _, in := range out {
		slices.SortFunc(in.NotReady, func(a, b NotReady) int {
			return cmp.Or(cmp.Compare(b.Instances, a.Instances), cmp.Compare(a.Reason, b.Reason))
		})
	}
	return out, nil
}

// WhyInstances says why a deployment's instances in a region are not
// ready, one reason per reason its agent gives, most instances first:
// "3 of 3 instances CrashLoopBackOff (restarts 5)". Empty when none says.
func WhyInstances(resource string, in *Instances) []Reason {
	if in == nil {
		return nil
	}
	var out []Reason
	for _, r := range in.NotReady {
		msg := fmt.Sprintf("%d of %s %s", r.Instances, plural(int64(in.Total), "instance"), r.Reason)
		if r.Restarts > 0 {
			msg += fmt.Sprintf(" (restarts %d)", r.Restarts)
		}
		out = append(out, Reason{Code: ReasonInstancesNotReady, Message: msg, Resource: resource})
	}
	return out
}
