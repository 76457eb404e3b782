package regionhealth_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testmetrics"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func deploy(t *testing.T, op ctrlv1.OperatorServiceClient, id, region string) {
	t.Helper()
	if _, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{region}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
}

// What the alert rules read moves when a region is paused with changes
// pending and its agent gone, though no agent heartbeats any more: ctrld
// computes the gauges from the database, and they say what the console says.
func TestGaugesShowAPausedRegionWhoseAgentDiedFallingBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg, RegionHealth: regionhealth.Config{Interval: 50 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent := env.Agent("us-east")
	op := env.Operator("alice")
	deploy(t, op, "api", "us-east")

	// A live agent: streaming, caught up after its full sync, reporting.
	streamCtx, kill := context.WithCancel(ctx)
	s, err := agent.WatchDeploymentChanges(streamCtx, &ctrlv1.WatchDeploymentChangesRequest{Region: "us-east", AgentIdentity: "krane-0"})
	if err != nil {
		t.Fatal(err)
	}
	var resume uint64
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b := ev.GetBookmark(); b.GetFullSyncDone() {
			resume = b.GetResumeVersion()
			break
		}
	}
	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "us-east", AgentIdentity: "krane-0",
		AckedVersion: resume, LastFullSync: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the gauges never show a connected, caught-up agent", func() bool {
		connected, _ := testmetrics.Lookup(t, reg, "deploysync_region_agent_connected", "region", "us-east")
		lag, _ := testmetrics.Lookup(t, reg, "deploysync_stream_lag_changes", "region", "us-east")
		paused, _ := testmetrics.Lookup(t, reg, "deploysync_region_paused", "region", "us-east")
		_, heartbeat := testmetrics.Lookup(t, reg, "deploysync_region_heartbeat_age_seconds", "region", "us-east")
		_, fullSync := testmetrics.Lookup(t, reg, "deploysync_region_full_sync_age_seconds", "region", "us-east")
		return connected == 1 && lag == 0 && paused == 0 && heartbeat && fullSync
	})

	// One of its applies fails, then succeeds: the failing-resources
	// gauge (DeploysyncApplyFailing) follows what the agent reports.
	reportSync := func(r *ctrlv1.ResourceSync) {
		t.Helper()
		if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: "us-east", Resources: []*ctrlv1.ResourceSync{r}}); err != nil {
			t.Fatal(err)
		}
	}
	reportSync(&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", ReceivedVersion: resume, Error: "forbidden", FailingSince: timestamppb.Now()})
	eventually.True(t, 20*time.Second, "the gauges never show one failing resource", func() bool {
		failing, _ := testmetrics.Lookup(t, reg, "deploysync_region_failing_resources", "region", "us-east")
		return failing == 1
	})
	reportSync(&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", AppliedVersion: resume, ReceivedVersion: resume, InSync: true})
	eventually.True(t, 20*time.Second, "the gauges still show a failing resource", func() bool {
		failing, _ := testmetrics.Lookup(t, reg, "deploysync_region_failing_resources", "region", "us-east")
		return failing == 0
	})

	// The agent dies, an operator pauses the region, and a change waits.
	kill()
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "us-east", Paused: true}); err != nil {
		t.Fatal(err)
	}
	deploy(t, op, "web", "us-east")
	eventually.True(t, 20*time.Second, "the gauges never show the paused region with its agent gone and a change pending", func() bool {
		connected, _ := testmetrics.Lookup(t, reg, "deploysync_region_agent_connected", "region", "us-east")
		lag, _ := testmetrics.Lookup(t, reg, "deploysync_stream_lag_changes", "region", "us-east")
		lagSeconds, _ := testmetrics.Lookup(t, reg, "deploysync_region_lag_seconds", "region", "us-east")
		paused, _ := testmetrics.Lookup(t, reg, "deploysync_region_paused", "region", "us-east")
		return connected == 0 && lag == 1 && lagSeconds > 0 && paused == 1
	})
	if age, ok := testmetrics.Lookup(t, reg, "deploysync_region_heartbeat_age_seconds", "region", "us-east"); !ok || age < 0 {
		t.Errorf("heartbeat age %v (present %v), want the time since the dead agent's last report", age, ok)
	}

	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	o := regions.GetRegions()[0]
	if lag, _ := testmetrics.Lookup(t, reg, "deploysync_stream_lag_changes", "region", "us-east"); float64(o.GetLagChanges()) != lag || o.GetAgentConnected() || !o.GetPaused() {
		t.Errorf("the console says lag %d, connected %v, paused %v; the gauge says lag %v", o.GetLagChanges(), o.GetAgentConnected(), o.GetPaused(), lag)
	}
}

// A region without any agent counts every change as pending and has no
// heartbeat age (there is no last heartbeat to be old); a region no longer
// registered loses its series.
func TestGaugesOfRegionsWithoutAgentAndOfRemovedRegions(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("gone")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	deploy(t, op, "web", "eu")

	reg := prometheus.NewRegistry()
	p := regionhealth.NewPublisher(env.DB.Ent, env.DB.SQL, regionhealth.Config{}, slog.New(slog.DiscardHandler), metrics.New(reg))
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if lag, _ := testmetrics.Lookup(t, reg, "deploysync_stream_lag_changes", "region", "eu"); lag != 2 {
		t.Errorf("eu lag %v, want 2 (no agent ever acked)", lag)
	}
	if connected, ok := testmetrics.Lookup(t, reg, "deploysync_region_agent_connected", "region", "eu"); !ok || connected != 0 {
		t.Errorf("eu agent connected %v (present %v), want 0", connected, ok)
	}
	if _, ok := testmetrics.Lookup(t, reg, "deploysync_region_heartbeat_age_seconds", "region", "eu"); ok {
		t.Error("eu has a heartbeat age without any agent")
	}
	if _, ok := testmetrics.Lookup(t, reg, "deploysync_region_paused", "region", "gone"); !ok {
		t.Fatal("no series for the registered region gone")
	}

	if err := env.DB.Ent.Region.DeleteOneID("gone").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deploysync_stream_lag_changes", "deploysync_region_lag_seconds",
		"deploysync_region_agent_connected", "deploysync_region_paused"} {
		if _, ok := testmetrics.Lookup(t, reg, name, "region", "gone"); ok {
			t.Errorf("%s still has a series for the removed region", name)
		}
	}
	if _, ok := testmetrics.Lookup(t, reg, "deploysync_region_paused", "region", "eu"); !ok {
		t.Error("eu lost its series with the other region")
	}
}
