package cmdline

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// `deployments` says why a deployment's instances in a region are not
// ready, as its agent reports them: in the table's NOT READY column ("-"
// where nothing says) and in the JSON's not_in_sync, code
// instances_not_ready (beside what delivery waits for: no agent here).
func TestDeploymentsSayWhyInstancesAreNotReady(t *testing.T) {
	e := newCLIEnv(t)
	crashing := func(pod string, restarts int32) *ctrlv1.Instance {
		return &ctrlv1.Instance{PodName: pod, Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Reason: "CrashLoopBackOff", Restarts: restarts}
	}
	if _, err := e.env.Agent("eu").ReportDeploymentStatus(context.Background(), &ctrlv1.ReportDeploymentStatusRequest{Region: "eu",
		Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "api", Instances: []*ctrlv1.Instance{crashing("api-0", 2), crashing("api-1", 3)}}}}); err != nil {
		t.Fatal(err)
	}
	out, err := e.run("deployments")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		rows[strings.Fields(line)[3]] = line
	}
	if !strings.HasSuffix(rows["eu"], "  2 of 2 instances CrashLoopBackOff (restarts 5)") {
		t.Errorf("eu's row does not end with why its instances are not ready:\n%s", out)
	}
	if !strings.HasSuffix(rows["us"], "  -") {
		t.Errorf("us's row does not end with -:\n%s", out)
	}

	var doc struct {
		Deployments []struct {
			Regions []struct {
				Region    string `json:"region"`
				NotInSync []struct {
					Code, Message, Resource string
				} `json:"not_in_sync"`
			} `json:"regions"`
		} `json:"deployments"`
	}
	if err := e.runJSON(t, &doc, "deployments", "--region", "eu"); err != nil {
		t.Fatal(err)
	}
	reasons := doc.Deployments[0].Regions[0].NotInSync
	reasons = slices.DeleteFunc(reasons, func(r struct{ Code, Message, Resource string }) bool { return r.Code != "instances_not_ready" })
	got, _ := json.Marshal(reasons)
	if want := `[{"Code":"instances_not_ready","Message":"2 of 2 instances CrashLoopBackOff (restarts 5)","Resource":"deployment/api"}]`; string(got) != want {
		t.Errorf("JSON not_in_sync %s, want %s", got, want)
	}
}
