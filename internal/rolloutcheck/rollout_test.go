package rolloutcheck_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/checks"
	agentmetrics "github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/rolloutcheck"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Three regions, each its own control plane with kwok (whose stages fail
// the Pods of images tagged :crashloop), shared by the package's tests.
var (
	regions  = []string{"eu", "us", "ap"}
	clusters = map[string]*kubetest.Shared{
		"eu": {Options: kubetest.Options{Workloads: true, PodLogs: true}},
		"us": {Options: kubetest.Options{Workloads: true}},
		"ap": {Options: kubetest.Options{Workloads: true}},
	}
)

func TestMain(m *testing.M) {
	os.Exit(kubetest.RunShared(m, clusters["eu"], clusters["us"], clusters["ap"]))
}

// stack is ctrld, the three clusters with an image log each, and an agent
// per region; with metrics, a traffic simulator and a Prometheus per
// region too, which the region's agent asks for its checks.
type stack struct {
	op    ctrlv1.OperatorServiceClient
	env   *servertest.Env
	logs  map[string]*rolloutcheck.ImageLog
	proms map[string]*promtest.Server
}

func start(t *testing.T) *stack {
	t.Helper()
	return startWithout(t)
}

// startWithout is start with no in-process agent in the regions skipped
// (a test runs a real agentd process there).
func startWithout(t *testing.T, skipped ...string) *stack {
	t.Helper()
	return startStack(t, false, skipped...)
}

// startWithMetrics is start with a simulator and a Prometheus per region.
func startWithMetrics(t *testing.T) *stack {
	t.Helper()
	return startStack(t, true)
}

func startStack(t *testing.T, metrics bool, skipped ...string) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := servertest.Start(t, server.Config{RolloutInterval: 200 * time.Millisecond})
	s := &stack{op: env.Operator("dana"), env: env, logs: map[string]*rolloutcheck.ImageLog{}, proms: map[string]*promtest.Server{}}
	for _, region := range regions {
		c := clusters[region].Get(t)
		clients, err := agent.ClientsFor(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		// The log starts before ctrld knows the region: it sees every
		// StatefulSet the agent will ever write.
		if s.logs[region], err = rolloutcheck.WatchImages(ctx, region, clients.Kube); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(skipped, region) {
			continue
		}
		token := env.AgentToken(region)
		cluster := ctrlv1.NewClusterServiceClient(servertest.Dial(t, env.Server.Addr, token))
		cfg := agent.Config{Region: region, Identity: "agent-" + region, StatusInterval: 200 * time.Millisecond,
			HeartbeatInterval: 500 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond}
		if metrics {
			s.proms[region] = simulate(ctx, t, clients.Kube)
			cfg.Checks = checks.Config{PrometheusURL: s.proms[region].URL(), Timeout: 2 * time.Second}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			agent.Run(ctx, cfg, clients, cluster, servertest.Logger(), agentmetrics.New(prometheus.NewRegistry()))
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	return s
}

// waitRollout waits until the deployment's newest rollout has ended and
// returns it.
func (s *stack) waitRollout(t *testing.T, id string, within time.Duration) *ctrlv1.Rollout {
	t.Helper()
	var r *ctrlv1.Rollout
	var err error
	ended := false
	defer func() {
		if !ended {
			t.Logf("the rollout was last %v, %v", r, err)
		}
	}()
	eventually.True(t, within, "the rollout of "+id+" never ended", func() bool {
		var resp *ctrlv1.GetRolloutResponse
		resp, err = s.op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: id})
		r = resp.GetRollout()
		return err == nil && (r.GetState() == "succeeded" || r.GetState() == "rolled_back")
	})
	ended = true
	return r
}

// waitReady waits until every region runs replicas ready instances of the
// deployment on image.
func (s *stack) waitReady(t *testing.T, id, image string, replicas int32, within time.Duration) {
	t.Helper()
	var r *ctrlv1.ListDeploymentsResponse
	var err error
	done := false
	defer func() {
		if !done {
			t.Logf("the deployments were last %v, %v", r, err)
		}
	}()
	eventually.True(t, within, fmt.Sprintf("%s never ready on %s in every region", id, image), func() bool {
		r, err = s.op.ListDeployments(context.Background(), &ctrlv1.ListDeploymentsRequest{})
		ready := 0
		for _, d := range r.GetDeployments() {
			for _, in := range d.GetRegions() {
				if d.DeploymentId == id && in.Image == image && in.ReadyInstances == replicas && in.Instances == replicas {
					ready++
				}
			}
		}
		return err == nil && ready == len(regions)
	})
	done = true
}

// A good image rolls out wave by wave, each wave after the one before
// baked; a bad image fails in the canary region, halts and rolls back,
// and no other region's StatefulSet ever carries it, as the API servers
// themselves say.
func TestAGoodImageRollsOutInWavesAndABadOneStopsAtTheCanary(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	const bake = 3 * time.Second
	req := &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod", Image: "ghcr.io/acme/api:v1",
		CpuMillicores: 50, MemoryMib: 64, Regions: regions, Replicas: 2}
	if _, err := s.op.Deploy(ctx, req); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t, "api", "ghcr.io/acme/api:v1", 2, 2*time.Minute)
	_, err := s.op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "acme", EnvironmentId: "prod",
		Strategy: &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
			{Regions: []string{"eu"}, Bake: durationpb.New(bake), Deadline: durationpb.New(time.Minute)},
			{Regions: []string{"us"}, Bake: durationpb.New(bake), Deadline: durationpb.New(time.Minute)},
			{Regions: []string{"*"}, Deadline: durationpb.New(time.Minute)},
		}}})
	if err != nil {
		t.Fatal(err)
	}

	// The good image: eu, then us at least a bake later, then ap.
	good := "ghcr.io/acme/api:v2"
	if _, err := s.op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &good}); err != nil {
		t.Fatal(err)
	}
	if r := s.waitRollout(t, "api", 3*time.Minute); r.GetState() != "succeeded" {
		t.Fatalf("the good image's rollout: %s (%s)", r.GetState(), r.GetReason())
	}
	first := map[string]time.Time{}
	for _, region := range regions {
		seen := s.logs[region].Sightings("api", good)
		if len(seen) == 0 {
			t.Fatalf("%s's StatefulSet never carried %s", region, good)
		}
		first[region] = seen[0].At
	}
	t.Logf("the good image reached eu at %s, us at %s, ap at %s", first["eu"].Format(time.StampMilli),
		first["us"].Format(time.StampMilli), first["ap"].Format(time.StampMilli))
	for _, pair := range [][2]string{{"eu", "us"}, {"us", "ap"}} {
		if gap := first[pair[1]].Sub(first[pair[0]]); gap < bake {
			t.Errorf("%s got the image %s after %s; its wave should wait for %s's bake of %s", pair[1], gap, pair[0], pair[0], bake)
		}
	}
	s.waitReady(t, "api", good, 2, 2*time.Minute)

	// The bad image: it crash-loops in eu, the rollout halts and rolls
	// back, and us and ap never see it.
	bad := "ghcr.io/acme/api:crashloop"
	if _, err := s.op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &bad}); err != nil {
		t.Fatal(err)
	}
	r := s.waitRollout(t, "api", 3*time.Minute)
	if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "eu: ") || !strings.Contains(r.GetReason(), "CrashLoopBackOff") {
		t.Fatalf("the bad image's rollout: %s (%s), want rolled back on eu's CrashLoopBackOff", r.GetState(), r.GetReason())
	}
	// The evidence travels with the halt: what the crashed container
	// said (kwok's stage writes it as a kubelet reports a termination
	// message).
	if !strings.Contains(r.GetReason(), `CrashLoopBackOff: "panic: DATABASE_URL is not set"`) && !strings.Contains(r.GetReason(), `): "panic: DATABASE_URL is not set"`) {
		t.Errorf("the bad image's halt: %s; want it to quote the crashed container", r.GetReason())
	}
	t.Logf("the bad image's rollout: %s: %s", r.GetState(), r.GetReason())
	if len(s.logs["eu"].Sightings("api", bad)) == 0 {
		t.Errorf("eu's StatefulSet never carried %s: the canary proved nothing", bad)
	}
	for _, region := range []string{"us", "ap"} {
		if seen := s.logs[region].Sightings("api", bad); len(seen) > 0 {
			t.Errorf("%s's StatefulSet carried the bad image at %s; it is past the failed wave", region, seen[0].At.Format(time.StampMilli))
		}
	}
	s.waitReady(t, "api", good, 2, 2*time.Minute)
	record, err := s.env.DB.Ent.AuditLog.Query().Where(auditlog.Action("rollout.rollback")).Only(ctx)
	if err != nil || record.Actor != "rollout" || !strings.Contains(record.Detail, "CrashLoopBackOff") {
		t.Errorf("the rollback's audit record: %+v, %v", record, err)
	}
	for _, region := range regions {
		if gaps := s.logs[region].Gaps(); len(gaps) > 0 {
			t.Errorf("%s's image log has gaps, so it proves nothing for them: %s", region, strings.Join(gaps, "; "))
		}
	}
}
