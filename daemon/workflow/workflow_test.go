package workflow_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/instance"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// An instance stored in a region where the deployment does not run (intake
// refuses such reports now; rows from before, or written by hand, remain)
// does not move its workflow: it stays pending until an instance appears
// where it should run, then deploys.
func TestInstancesElsewhereDoNotMoveTheWorkflow(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	if _, err := env.Operator("alice").Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"us"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	driver := workflow.New(env.DB.Ent, workflow.Config{}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	store := func(region string, ready bool) {
		t.Helper()
		err := env.DB.Ent.Instance.Create().SetDeploymentID("api").SetRegion(region).SetPodName("api-0").
			SetStatus(instance.StatusRunning).SetReady(ready).Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	workflowAfterEvaluate := func() deployment.WorkflowStatus {
		t.Helper()
		if err := driver.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
		return env.DB.Ent.Deployment.GetX(ctx, "api").WorkflowStatus
	}

	store("eu", true)
	if got := workflowAfterEvaluate(); got != deployment.WorkflowStatusPending {
		t.Fatalf("workflow %s with a ready instance only in eu, where api does not run; want pending", got)
	}
	store("us", false)
	if got := workflowAfterEvaluate(); got != deployment.WorkflowStatusDeploying {
		t.Fatalf("workflow %s with an instance in us; want deploying", got)
	}
}
