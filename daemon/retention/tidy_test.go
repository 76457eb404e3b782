package retention_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Retention tidies up (sync rows of deleted resources, old revisions)
// while agents report every few milliseconds and operators scale, delete
// and deploy again: no run fails (a locking scan of the sync rows
// deadlocked with the agents' reports, and each deadlock cancelled that
// run's deletion of old change rows), and the orphans are gone at the end.
func TestRetentionTidiesUpBesideAgentsAndOperators(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	op := env.Operator("alice")
	agents := map[string]ctrlv1.ClusterServiceClient{"eu": env.Agent("eu"), "us": env.Agent("us")}
	deploy := func(id string) error {
		_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu", "us"}, Replicas: 1})
		return err
	}
	const n = 60
	for i := range n {
		if err := deploy(fmt.Sprintf("d%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	var reported, scaled atomic.Int64 // the writes that went through: the run raced them
	for region, agent := range agents {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				var rs []*ctrlv1.ResourceSync
				for j := range n {
					rs = append(rs, &ctrlv1.ResourceSync{Kind: "deployment", ResourceId: fmt.Sprintf("d%02d", j), InSync: (i+j)%2 == 0})
				}
				if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: region, Resources: rs}); err == nil {
					reported.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Go(func() { // an operator churning: scales (revisions), deletes and deploys again (orphans)
		for i := 0; time.Now().Before(deadline); i++ {
			id := fmt.Sprintf("d%02d", i%n)
			if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: id, Replicas: int32(1 + i%3)}); err == nil {
				scaled.Add(1)
			}
			if i%5 == 0 {
				op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: id})
				deploy(id)
			}
		}
	})
	m := metrics.New(prometheus.NewRegistry())
	c := retention.New(env.DB.SQL, retention.Config{RevisionsKept: 2}, servertest.Logger(), m)
	runs := 0
	for time.Now().Before(deadline) {
		runs++
		if _, err := c.RunOnce(ctx); err != nil {
			t.Errorf("run %d: %v", runs, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	if reported.Load() == 0 || scaled.Load() == 0 {
		t.Fatalf("%d reports and %d scales went through: the runs raced nothing", reported.Load(), scaled.Load())
	}
	if failed := testutil.ToFloat64(m.CleanupRuns.WithLabelValues("error")) + testutil.ToFloat64(m.CleanupRuns.WithLabelValues("tidy_error")); failed > 0 {
		t.Errorf("%v of %d retention runs failed beside agents and operators", failed, runs)
	}

	// At rest, one more run leaves no orphan and at most 2 revisions each.
	if _, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "d00"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var orphans, most int
	if err := env.DB.SQL.QueryRow(`SELECT COUNT(*) FROM resource_syncs s WHERE NOT EXISTS (SELECT 1 FROM deployment_topology d
		WHERE d.deployment_id = s.resource_id AND d.region = s.region)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.SQL.QueryRow("SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM deployment_revisions GROUP BY deployment_id) x").Scan(&most); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || most > 2 {
		t.Errorf("after a run at rest: %d orphan sync rows, a deployment with %d revisions; want 0 and at most 2", orphans, most)
	}
}
