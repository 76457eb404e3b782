package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// reasonCodes lists reasons' codes, in order.
func reasonCodes(reasons []*ctrlv1.SyncReason) string {
	var out []string
	for _, r := range reasons {
		out = append(out, r.Code)
	}
	return strings.Join(out, ",")
}

// The operator API says why a region and a deployment in it are not in
// sync, the way on-call asks it: a paused region holds a scale (since
// when), a dead agent is down since its last heartbeat with its last
// error, a failing apply names the resource, its error and since when;
// once all that is cleared, the region and the deployment are in sync and
// say nothing. The deployments list says the same per region.
func TestTheViewsSayWhyARegionAndADeploymentAreNotInSync(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	op := env.Operator("alice")
	agent := env.Agent("eu")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	region := func() *ctrlv1.GetRegionResponse {
		t.Helper()
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	heartbeat := func(acked uint64, lastErr string) {
		t.Helper()
		if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0",
			AckedVersion: acked, LastError: lastErr}); err != nil {
			t.Fatal(err)
		}
	}

	// An agent that reported once, then died with an error three minutes ago.
	heartbeat(0, "stream: connection refused")
	heard := time.Now().Add(-3 * time.Minute).UTC()
	if _, err := env.DB.SQL.ExecContext(ctx, "UPDATE agents SET last_heartbeat = ? WHERE region = 'eu'", heard); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	r := region()
	if got := reasonCodes(r.Overview.NotInSync); got != "paused,agent_down,waiting" {
		t.Fatalf("region reasons %s (%v), want paused,agent_down,waiting", got, r.Overview.NotInSync)
	}
	if r.Overview.PausedSince == nil || time.Since(r.Overview.PausedSince.AsTime()) > time.Minute {
		t.Errorf("paused_since %v, want just now", r.Overview.PausedSince)
	}
	down := r.Overview.NotInSync[1]
	if !down.Since.AsTime().Equal(heard.Truncate(time.Microsecond)) || !strings.Contains(down.Message, "connection refused") {
		t.Errorf("agent down reason %+v, want since the last heartbeat with the last error", down)
	}
	d := r.Deployments[0]
	if d.Sync.PendingChanges != 1 || reasonCodes(d.NotInSync) != "paused,agent_down" || !strings.HasPrefix(d.NotInSync[0].Message, "1 change wait: the region is paused since") {
		t.Errorf("deployment in a paused region with a dead agent: sync %+v, reasons %v", d.Sync, d.NotInSync)
	}

	// Back: the agent applied everything but api's apply now fails.
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	head := region().Overview.HeadVersion
	failingSince := time.Now().Add(-time.Minute).UTC()
	if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{
		Kind: "deployment", ResourceId: "api", AppliedVersion: head - 1, ReceivedVersion: head, Error: "admission webhook \"quota\" denied the request",
		FailingSince: timestamppb.New(failingSince)}}}); err != nil {
		t.Fatal(err)
	}
	heartbeat(head-1, "")
	markStreaming(t, env)
	r = region()
	if got := reasonCodes(r.Overview.NotInSync); got != "apply_failing,waiting" || r.Overview.FailingResources != 1 {
		t.Fatalf("region reasons %s (%v), failing %d; want apply_failing,waiting and 1", got, r.Overview.NotInSync, r.Overview.FailingResources)
	}
	if m := r.Overview.NotInSync[0].Message; !strings.Contains(m, "deployment/api apply failing since") || !strings.Contains(m, "denied the request") {
		t.Errorf("apply failing message %q", m)
	}
	d = r.Deployments[0]
	if !d.Sync.Reported || d.Sync.InSync || d.Sync.AppliedVersion != head-1 || reasonCodes(d.NotInSync) != "apply_failing" {
		t.Errorf("failing deployment: sync %+v, reasons %v", d.Sync, d.NotInSync)
	}
	list, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := reasonCodes(list.Deployments[0].Regions[0].NotInSync); got != "apply_failing" {
		t.Errorf("deployments list reasons %s, want apply_failing", got)
	}

	// Fixed: applied and acked.
	if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{
		Kind: "deployment", ResourceId: "api", AppliedVersion: head, ReceivedVersion: head, InSync: true}}}); err != nil {
		t.Fatal(err)
	}
	heartbeat(head, "")
	r = region()
	if len(r.Overview.NotInSync) != 0 || len(r.Deployments[0].NotInSync) != 0 || !r.Deployments[0].Sync.InSync {
		t.Errorf("in sync, yet: region %v, deployment %v %+v", r.Overview.NotInSync, r.Deployments[0].NotInSync, r.Deployments[0].Sync)
	}
}

// markStreaming records the eu agent as holding a stream, as a ctrld does
// when it opens one (these tests speak for the agent without streaming).
func markStreaming(t *testing.T, env *servertest.Env) {
	t.Helper()
	if _, err := env.DB.SQL.ExecContext(context.Background(),
		"UPDATE agents SET connected_to = 'ctrld-test', connected_since = NOW(6) WHERE region = 'eu'"); err != nil {
		t.Fatal(err)
	}
}

// A failure the agent reported stops counting once it no longer describes
// the resource: after the deployment is stopped (a new agent process never
// hears of a stopped deployment again, so it would stay for good), and
// after the deployment is deleted and deployed again under the same ID
// (the new one has not been applied yet, let alone failed).
func TestAFailureOutlivesNeitherAStopNorARedeploy(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	op := env.Operator("alice")
	agent := env.Agent("eu")
	deployAPI := func(image string) {
		t.Helper()
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
			Image: image, CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	head := func() uint64 {
		t.Helper()
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Overview.HeadVersion
	}
	// fail reports the apply of the newest change failing, as an agent
	// that received it does.
	fail := func(msg string) {
		t.Helper()
		if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{
			Kind: "deployment", ResourceId: "api", ReceivedVersion: head(), Error: msg, FailingSince: timestamppb.Now()}}}); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp := func() {
		t.Helper()
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0",
			AckedVersion: r.Overview.HeadVersion}); err != nil {
			t.Fatal(err)
		}
		markStreaming(t, env)
	}
	failing := func() (*ctrlv1.RegionOverview, []*ctrlv1.SyncReason) {
		t.Helper()
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Overview, r.Deployments[0].NotInSync
	}

	deployAPI("app:1")
	fail("exceeded quota")
	caughtUp()
	if o, d := failing(); o.FailingResources != 1 || reasonCodes(d) != "apply_failing" {
		t.Fatalf("before the stop: failing %d, deployment reasons %v", o.FailingResources, d)
	}
	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu", Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	caughtUp()
	if o, d := failing(); o.FailingResources != 0 || len(o.NotInSync) != 0 || len(d) != 0 {
		t.Errorf("stopped and caught up: failing %d, region reasons %v, deployment reasons %v; want in sync", o.FailingResources, o.NotInSync, d)
	}
	// Retention deleting the stop's change row (the agent acked past it)
	// does not bring the old failure back: the agent never reports on a
	// stopped deployment again.
	cleaner := retention.New(env.DB.SQL, retention.Config{TTL: time.Nanosecond}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	stopped := head()
	// Retention deletes up to the tailer's persisted watermark, which
	// passes the stop in its own time.
	eventually.True(t, 10*time.Second, "retention never deleted the change rows up to the stop's", func() bool {
		if _, err := cleaner.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := env.DB.SQL.QueryRowContext(ctx, "SELECT COUNT(*) FROM deployment_changes WHERE pk <= ?", stopped).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	if o, _ := failing(); o.FailingResources != 0 {
		t.Errorf("stopped, and the stop's change row deleted by retention: failing %d, want 0", o.FailingResources)
	}
	// The stop's own delete failing the same way is news: counted again.
	fail("exceeded quota")
	if o, _ := failing(); o.FailingResources != 1 {
		t.Errorf("the stop's delete fails: failing %d, want 1", o.FailingResources)
	}

	if _, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "api"}); err != nil {
		t.Fatal(err)
	}
	deployAPI("app:1")
	fail("image app:1 cannot be pulled")
	if _, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "api"}); err != nil {
		t.Fatal(err)
	}
	deployAPI("app:2") // the agent is down: it has not reported on this one
	if o, d := failing(); o.FailingResources != 0 || reasonCodes(d) == "apply_failing" || strings.Contains(reasonCodes(o.NotInSync), "apply_failing") {
		t.Errorf("redeployed: failing %d, region reasons %v, deployment reasons %v; the old one's failure is not the new one's",
			o.FailingResources, o.NotInSync, d)
	}
	fail("image app:2 cannot be pulled") // the new one's own failure
	if o, d := failing(); o.FailingResources != 1 || reasonCodes(d) != "apply_failing" {
		t.Errorf("the redeployed one fails: failing %d, deployment reasons %v", o.FailingResources, d)
	}
}

// Each region counts its own failing resources and names the one failing
// longest, however many regions fail at once.
func TestEachRegionNamesItsLongestFailure(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	op := env.Operator("alice")
	env.AgentToken("eu")
	env.AgentToken("us")
	for _, id := range []string{"api", "web", "db"} {
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu", "us"}, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	head, err := changelog.NewestVersion(ctx, env.DB.SQL)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	fail := func(id string, ago time.Duration) *ctrlv1.ResourceSync {
		return &ctrlv1.ResourceSync{Kind: "deployment", ResourceId: id, ReceivedVersion: head, Error: id + " fails",
			FailingSince: timestamppb.New(now.Add(-ago))}
	}
	for region, rs := range map[string][]*ctrlv1.ResourceSync{
		"eu": {fail("api", time.Minute), fail("web", time.Hour), fail("db", 2*time.Minute)},
		"us": {fail("db", 3*time.Minute)},
	} {
		if _, err := env.Agent(region).ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: region, Resources: rs}); err != nil {
			t.Fatal(err)
		}
	}
	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		n        int64
		resource string
	}{"eu": {3, "deployment/web"}, "us": {1, "deployment/db"}}
	checked := 0
	for _, r := range regions.Regions {
		w, ok := want[r.Region]
		if !ok {
			continue
		}
		checked++
		var got string
		for _, reason := range r.NotInSync {
			if reason.Code == "apply_failing" {
				got = reason.Resource
			}
		}
		if r.FailingResources != w.n || got != w.resource {
			t.Errorf("%s: %d failing, longest %q; want %d and %q", r.Region, r.FailingResources, got, w.n, w.resource)
		}
	}
	if checked != len(want) {
		t.Errorf("ListRegions answered %d of the %d regions checked", checked, len(want))
	}
}
