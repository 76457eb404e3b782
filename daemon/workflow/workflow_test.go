package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
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
	driver := newDriver(env, workflow.Config{})
	workflowAfterEvaluate := func() deployment.WorkflowStatus {
		t.Helper()
		if err := driver.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
		status, _ := workflowOf(t, env, "api")
		return status
	}

	storeInstance(t, env, "api", "eu", true)
	if got := workflowAfterEvaluate(); got != deployment.WorkflowStatusPending {
		t.Fatalf("workflow %s with a ready instance only in eu, where api does not run; want pending", got)
	}
	storeInstance(t, env, "api", "us", false)
	if got := workflowAfterEvaluate(); got != deployment.WorkflowStatusDeploying {
		t.Fatalf("workflow %s with an instance in us; want deploying", got)
	}
}

// newDriver is a workflow driver on env's database (besides the one env's
// ctrld runs, which decides the same).
func newDriver(env *servertest.Env, cfg workflow.Config) *workflow.Driver {
	return workflow.New(env.DB.Ent, cfg, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
}

// createPending creates n deployments running in region with one replica,
// in bulk, IDs prefix-00000 on.
func createPending(t *testing.T, env *servertest.Env, prefix, region string, n int) {
	t.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 1000 {
		tx, err := env.DB.Ent.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var deps []*ent.DeploymentCreate
		var tops []*ent.DeploymentTopologyCreate
		for i := lo; i < min(n, lo+1000); i++ {
			id := fmt.Sprintf("%s-%05d", prefix, i)
			deps = append(deps, tx.Deployment.Create().SetID(id).SetWorkspaceID("ws").SetEnvironmentID("prod").
				SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64))
			tops = append(tops, tx.DeploymentTopology.Create().SetDeploymentID(id).SetRegion(region).SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1"))
		}
		tx.Deployment.CreateBulk(deps...).ExecX(ctx)
		tx.DeploymentTopology.CreateBulk(tops...).ExecX(ctx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func storeInstance(t *testing.T, env *servertest.Env, id, region string, ready bool) {
	t.Helper()
	err := env.DB.Ent.Instance.Create().SetDeploymentID(id).SetRegion(region).SetPodName(id + "-0").
		SetStatus(instance.StatusRunning).SetReady(ready).Exec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
}

func workflowOf(t *testing.T, env *servertest.Env, id string) (deployment.WorkflowStatus, string) {
	t.Helper()
	d := env.DB.Ent.Deployment.GetX(context.Background(), id)
	return d.WorkflowStatus, d.WorkflowError
}

// However many deployments wait, each one's instances move its workflow:
// the driver decides what changed, not the same first thousand again and
// again.
func TestEveryWaitingDeploymentMovesWhenItsInstancesCome(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ctx := context.Background()
	createPending(t, env, "wait", "eu", 2500)
	driver := newDriver(env, workflow.Config{})
	if err := driver.Evaluate(ctx); err != nil { // the first round reads every unfinished one
		t.Fatal(err)
	}
	for _, id := range []string{"wait-00000", "wait-01499", "wait-02499"} {
		storeInstance(t, env, id, "eu", true)
	}
	if err := driver.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"wait-00000", "wait-01499", "wait-02499"} {
		if got, _ := workflowOf(t, env, id); got != deployment.WorkflowStatusReady {
			t.Errorf("%s: workflow %s with its one replica ready; want ready", id, got)
		}
	}
	if got, _ := workflowOf(t, env, "wait-01000"); got != deployment.WorkflowStatusPending {
		t.Errorf("wait-01000: workflow %s without instances; want pending", got)
	}
	// A driver that starts afresh (a restarted ctrld) decides every
	// unfinished deployment in its first round.
	storeInstance(t, env, "wait-02000", "eu", false)
	if err := newDriver(env, workflow.Config{}).Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := workflowOf(t, env, "wait-02000"); got != deployment.WorkflowStatusDeploying {
		t.Errorf("wait-02000: workflow %s with an instance, after a restart; want deploying", got)
	}
}

// A report the driver's window misses (its updated_at older than the last
// evaluation by more than the overlap: a transaction that committed long
// after its write, or a replica whose clock is behind) still moves its
// deployment at the next full pass, not only at its timeout.
func TestALateReportMovesItsDeploymentAtTheNextFullPass(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ctx := context.Background()
	longAgo := time.Now().Add(-10 * time.Minute)
	// Each driver runs a first round, a full pass, before the report; the
	// report and its deployment's topology then look written long ago.
	lateReport := func(driver *workflow.Driver, prefix string) string {
		t.Helper()
		createPending(t, env, prefix, "eu", 1)
		id := prefix + "-00000"
		err := store.WithTx(ctx, env.DB.Ent, func(tx *ent.Tx) error {
			return tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(id)).SetUpdatedAt(longAgo).Exec(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := driver.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
		err = env.DB.Ent.Instance.Create().SetDeploymentID(id).SetRegion("eu").SetPodName(id + "-0").
			SetStatus(instance.StatusRunning).SetReady(true).SetUpdatedAt(longAgo).Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	// Without a full pass due, the window misses the report: what the full
	// pass is for.
	hourly := newDriver(env, workflow.Config{FullPass: time.Hour})
	missed := lateReport(hourly, "missed")
	if err := hourly.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := workflowOf(t, env, missed); got != deployment.WorkflowStatusPending {
		t.Fatalf("workflow %s: the late report was seen without a full pass, so this test shows nothing", got)
	}

	often := newDriver(env, workflow.Config{FullPass: 50 * time.Millisecond})
	seen := lateReport(often, "seen")
	time.Sleep(60 * time.Millisecond) // a full pass is due
	if err := often.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := workflowOf(t, env, seen); got != deployment.WorkflowStatusReady {
		t.Fatalf("workflow %s after a full pass, with its one replica ready; want ready", got)
	}
}

// Deployments past the timeout are decided in one round, each with its
// own reason; one that is ready by then is ready, not failed.
func TestTimedOutDeploymentsFailWithTheirOwnReasons(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	env.AgentToken("us")
	ctx := context.Background()
	createPending(t, env, "eu", "eu", 1200)
	createPending(t, env, "us", "us", 3)
	storeInstance(t, env, "eu-00007", "eu", true)
	storeInstance(t, env, "us-00001", "us", false)
	time.Sleep(20 * time.Millisecond)
	if err := newDriver(env, workflow.Config{Timeout: 10 * time.Millisecond}).Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"eu-00000": "failed: not ready after 10ms: eu 0/1 ready",
		"eu-01199": "failed: not ready after 10ms: eu 0/1 ready",
		"eu-00007": "ready: ",
		"us-00001": "failed: not ready after 10ms: us 0/1 ready",
	} {
		status, reason := workflowOf(t, env, id)
		if got := string(status) + ": " + reason; got != want {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
	n := env.DB.Ent.Deployment.Query().Where(deployment.WorkflowStatusIn(deployment.WorkflowStatusPending, deployment.WorkflowStatusDeploying)).CountX(ctx)
	if n != 0 {
		t.Errorf("%d deployments still unfinished after one round past their timeout", n)
	}
}
