package kinds

import (
	"testing"

	"github.com/deploysync/deploysync/ent"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A topology whose deployment was not read (deleted in between) is a
// delete of that deployment, not a nil dereference that ends the process.
func TestTopologyWithoutItsDeploymentIsADelete(t *testing.T) {
	ev := deploymentEvent(&ent.DeploymentTopology{DeploymentID: "api", Replicas: 3}, nil)
	d := ev.GetDeployment()
	if d.GetAction() != ctrlv1.Action_ACTION_DELETE || d.GetDeployment().GetDeploymentId() != "api" {
		t.Fatalf("got %v, want a delete of api", ev)
	}
}
