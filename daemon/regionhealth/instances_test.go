package regionhealth_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// What an agent reports of why instances are not ready reaches the
// operator API's "why" of the deployment in its region, in both views
// (the deployments list, the region page), grouped by reason with the
// restarts, most instances first; it goes when the instances recover.
func TestWhyShowsWhyInstancesAreNotReady(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	deploy(t, op, "web", "eu")
	report := func(id string, in ...*ctrlv1.Instance) {
		t.Helper()
		if _, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu",
			Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: id, Instances: in}}}); err != nil {
			t.Fatal(err)
		}
	}
	crashing := func(pod string, restarts int32) *ctrlv1.Instance {
		return &ctrlv1.Instance{PodName: pod, Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Reason: "CrashLoopBackOff", Restarts: restarts, SpecHash: "rev2"}
	}
	ready := &ctrlv1.Instance{PodName: "api-0", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true, SpecHash: "rev1", Restarts: 7}
	// why returns api's reasons in eu of the instances' kind, from both
	// views (which must agree), and its ready and total counts.
	why := func() (msgs []string, readyN, total int32) {
		t.Helper()
		list, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		region, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		var views [][]string
		for _, d := range append(region.GetDeployments(), list.GetDeployments()[slices.IndexFunc(list.GetDeployments(),
			func(d *ctrlv1.DeploymentSummary) bool { return d.GetDeploymentId() == "api" })].GetRegions()...) {
			if d.GetDeploymentId() != "api" {
				continue
			}
			var got []string
			for _, r := range d.GetNotInSync() {
				if r.GetCode() == regionhealth.ReasonInstancesNotReady {
					if r.GetResource() != "deployment/api" {
						t.Errorf("reason %q names resource %q", r.GetMessage(), r.GetResource())
					}
					got = append(got, r.GetMessage())
				}
			}
			views = append(views, got)
			readyN, total = d.GetReadyInstances(), d.GetInstances()
		}
		if len(views) != 2 || !slices.Equal(views[0], views[1]) {
			t.Fatalf("the region page and the deployments list disagree: %q", views)
		}
		return views[0], readyN, total
	}

	report("api", crashing("api-0", 1), crashing("api-1", 2), crashing("api-2", 2))
	report("web", &ctrlv1.Instance{PodName: "web-0", Reason: "ImagePullBackOff"})
	if msgs, r, n := why(); !slices.Equal(msgs, []string{"3 of 3 instances CrashLoopBackOff (restarts 5)"}) || r != 0 || n != 3 {
		t.Errorf("3 crash-looping: why %q, %d/%d ready", msgs, r, n)
	}

	report("api", ready, crashing("api-1", 3), &ctrlv1.Instance{PodName: "api-2", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING, Reason: "Unschedulable"},
		&ctrlv1.Instance{PodName: "api-3", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING, Reason: "Unschedulable"},
		&ctrlv1.Instance{PodName: "api-4", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING})
	if msgs, r, n := why(); !slices.Equal(msgs, []string{"2 of 5 instances Unschedulable", "1 of 5 instances CrashLoopBackOff (restarts 3)"}) || r != 1 || n != 5 {
		t.Errorf("mixed: why %q, %d/%d ready", msgs, r, n)
	}

	report("api", ready)
	if msgs, r, n := why(); len(msgs) != 0 || r != 1 || n != 1 {
		t.Errorf("recovered: why %q, %d/%d ready; want no reason", msgs, r, n)
	}
	if msgs := strings.Join(whyOf(t, op, "web"), "; "); msgs != "1 of 1 instance ImagePullBackOff" {
		t.Errorf("web's why %q", msgs)
	}
}

// whyOf is the instance reasons of deployment id in its region, from the
// deployments list.
func whyOf(t *testing.T, op ctrlv1.OperatorServiceClient, id string) []string {
	t.Helper()
	list, err := op.ListDeployments(context.Background(), &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range list.GetDeployments() {
		for _, r := range d.GetRegions() {
			for _, reason := range r.GetNotInSync() {
				if d.GetDeploymentId() == id && reason.GetCode() == regionhealth.ReasonInstancesNotReady {
					out = append(out, reason.GetMessage())
				}
			}
		}
	}
	return out
}
