package agent_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Two regions, two real clusters (API server, controller manager,
// scheduler and kwok each).
var (
	euCluster = kubetest.Shared{Options: kubetest.Options{Workloads: true}}
	usCluster = kubetest.Shared{Options: kubetest.Options{Workloads: true}}
)

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &euCluster, &usCluster, &apiCluster)) }

// agentEnv is where most agent tests start: the shared API-only cluster
// (isolated), its admin client, ctrld with an operator client, and an
// agent token for region eu.
type agentEnv struct {
	cluster *kubetest.Cluster
	admin   kubernetes.Interface
	ctrld   *servertest.Env
	op      ctrlv1.OperatorServiceClient
	ctx     context.Context
}

func newAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	c := isolate(t)
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	return &agentEnv{cluster: c, admin: c.Client(t), ctrld: env, op: env.Operator("t"), ctx: context.Background()}
}

// start runs an agent for region eu with the cluster's admin config (see
// startAgent).
func (e *agentEnv) start(t *testing.T, identity string, cfg agent.Config) context.CancelFunc {
	t.Helper()
	return startAgent(t, e.ctrld, "eu", identity, e.cluster.Config, cfg)
}

// startAgent runs an agent for region against the cluster behind kcfg
// until the test ends (or the returned function is called).
func startAgent(t *testing.T, env *servertest.Env, region, identity string, kcfg *rest.Config, cfg agent.Config) context.CancelFunc {
	t.Helper()
	return startMeteredAgent(t, env, region, identity, kcfg, cfg, prometheus.NewRegistry())
}

// startMeteredAgent is startAgent with the agent's metrics in reg.
func startMeteredAgent(t *testing.T, env *servertest.Env, region, identity string, kcfg *rest.Config, cfg agent.Config, reg *prometheus.Registry) context.CancelFunc {
	t.Helper()
	cfg.Region, cfg.Identity = region, identity
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 500*time.Millisecond
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	clients, err := agent.ClientsFor(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster := env.Agent(region)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := agent.Run(ctx, cfg, clients, cluster, servertest.Logger(), metrics.New(reg)); err != nil {
			t.Errorf("agent %s: %v", identity, err)
		}
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runningPods(t *testing.T, client kubernetes.Interface, ns, id string) int {
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "unkey.deployment.id=" + id})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// End to end: ctrld + MariaDB + one agent per region + two real clusters.
// Deploy to both regions with 3 replicas: objects appear, Pods run,
// instances are reported, the deployment becomes ready. Stop it in one
// region: its objects go, the other region is untouched.
func TestDeployToTwoRegionsAndStopOne(t *testing.T) {
	euc, usc := euCluster.Get(t), usCluster.Get(t)
	eu, us := euc.Client(t), usc.Client(t)
	env := servertest.Start(t, server.Config{})
	op := env.Operator("e2e")
	ctx := context.Background()
	startAgent(t, env, "eu", "agent-eu-0", euc.Config, agent.Config{})
	startAgent(t, env, "us", "agent-us-0", usc.Config, agent.Config{})

	start := time.Now()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "ghcr.io/acme/api:v1", CpuMillicores: 100, MemoryMib: 128, Regions: []string{"eu", "us"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	ns := naming.Namespace("acme", "prod")
	for name, client := range map[string]kubernetes.Interface{"eu": eu, "us": us} {
		waitFor(t, 60*time.Second, name+": 3 pods running", func() bool { return runningPods(t, client, ns, "api") == 3 })
		if _, err := client.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: service: %v", name, err)
		}
	}
	t.Logf("deploy to first Running pods in both regions: %s", time.Since(start).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "deployment ready", func() bool {
		list, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
		return err == nil && len(list.Deployments) == 1 && list.Deployments[0].WorkflowStatus == "ready"
	})
	t.Logf("deploy to ready: %s", time.Since(start).Round(time.Millisecond))

	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu",
		Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "eu objects gone", func() bool {
		_, err1 := eu.AppsV1().StatefulSets(ns).Get(ctx, "api", metav1.GetOptions{})
		_, err2 := eu.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2)
	})
	if runningPods(t, us, ns, "api") != 3 {
		t.Fatal("stopping eu touched us")
	}
	// The agents acked everything: no lag left.
	waitFor(t, 10*time.Second, "no lag in either region", func() bool {
		regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		if err != nil {
			return false
		}
		for _, r := range regions.Regions {
			if r.LagChanges != 0 || !r.AgentConnected {
				return false
			}
		}
		return true
	})
}

// A sentinel runs as a Deployment; its available replicas and health come
// back to ctrld.
func TestSentinelRunsAndReportsHealth(t *testing.T) {
	euc := euCluster.Get(t)
	env := servertest.Start(t, server.Config{})
	op := env.Operator("e2e")
	ctx := context.Background()
	env.AgentToken("eu")
	startAgent(t, env, "eu", "agent-eu-0", euc.Config, agent.Config{})
	if _, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "acme", EnvironmentId: "staging",
		Region: "eu", Image: "ghcr.io/acme/sentinel:v1", Replicas: 2, CpuMillicores: 100, MemoryMib: 64}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "sentinel healthy with 2 available", func() bool {
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
		return err == nil && len(r.Sentinels) == 1 && r.Sentinels[0].AvailableReplicas == 2 && r.Sentinels[0].Health == "healthy"
	})
}
