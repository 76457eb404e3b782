package trafficsim_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/manifest"
	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/trafficsim"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// One control plane with kwok for the package: its Pods really become
// Running and Ready (or, for kwok's failing tags, do not).
var shared = kubetest.Shared{Options: kubetest.Options{Workloads: true}}

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &shared)) }

// Through a real Prometheus scraping the simulator, which watches a real
// API server whose Pods kwok runs: an :errors image's error ratio is 0.2,
// a good one's 0; a :slow image's p90 latency is above a second, a good
// one's under 0.1 s; each ready Pod serves 10 requests a second. Pods that
// are not ready, and Pods agentd does not manage, get no traffic. When
// Prometheus is down, queries fail; back, they answer again.
func TestPrometheusSeesWhatEachImageDoes(t *testing.T) {
	c := shared.Get(t)
	client := c.Client(t)
	ns := c.NamespaceLabeled(t, map[string]string{manifest.ManagedByLabel: manifest.ManagedByValue})
	deploy(t, client, ns, "good", "nginx:1.27", "h1", 2)
	deploy(t, client, ns, "bad", "nginx:"+trafficsim.ErrorsTag, "h1", 2)
	deploy(t, client, ns, "slow", "nginx:"+trafficsim.SlowTag, "h1", 1)
	// Running, never ready (kwok's crash-looping stage).
	deploy(t, client, ns, "crashing", "nginx:"+kubetest.CrashLoopTag, "h1", 1)
	// Running and ready, but not agentd's: no managed-by label.
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: map[string]string{manifest.DeploymentLabel: "foreign"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:" + trafficsim.ErrorsTag}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	prom := promtest.StartForTest(t, promtest.Options{Targets: []string{startSimulator(t, client)}})
	in := fmt.Sprintf("namespace=%q", ns)
	errorRatio := func(deployment string) string {
		return fmt.Sprintf(`sum(rate(%[1]s{%[2]s, code="500", deployment=%[3]q}[10s])) / sum(rate(%[1]s{%[2]s, deployment=%[3]q}[10s]))`,
			trafficsim.RequestsMetric, in, deployment)
	}
	p90 := func(deployment string) string {
		return fmt.Sprintf(`histogram_quantile(0.9, sum by (le) (rate(%s_bucket{%s, deployment=%q}[10s])))`, trafficsim.DurationMetric, in, deployment)
	}
	perSecond := func(deployment string) string {
		return fmt.Sprintf(`sum(rate(%s{%s, deployment=%q}[10s]))`, trafficsim.RequestsMetric, in, deployment)
	}

	// Kwok makes the Pods ready within seconds, the first scrapes come
	// within Prometheus' 5 s discovery pause, and a rate needs two.
	for _, check := range []struct {
		what, query string
		accept      func([]promtest.Sample) error
	}{
		{"error ratio of nginx:errors", errorRatio("bad"), near(0.2, 0.02)},
		{"error ratio of nginx:1.27", errorRatio("good"), near(0, 0)},
		{"p90 latency of nginx:slow", p90("slow"), between(1, 2.5)},
		{"p90 latency of nginx:1.27", p90("good"), between(0, 0.1)},
		{"requests per second of two ready Pods", perSecond("good"), near(20, 1)},
	} {
		got := prom.WaitFor(t, 2*time.Minute, check.query, check.accept)
		t.Logf("%s: %v", check.what, got[0].Value)
	}

	// Pods kwok runs but that are never ready get nothing, nor do Pods
	// without agentd's mark, ready or not. (By now kwok has run them
	// for many seconds: it takes one or two.)
	for _, name := range []string{"crashing-0", "foreign"} {
		if p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("control: Pod %s is not Running (%v, %+v), so its getting no traffic would prove nothing", name, err, p.Status)
		}
	}
	for _, deployment := range []string{"crashing", "foreign"} {
		query := fmt.Sprintf(`sum(%s{%s, deployment=%q})`, trafficsim.RequestsMetric, in, deployment)
		if got, err := prom.Query(t.Context(), query); err != nil || len(got) > 0 && got[0].Value != 0 {
			t.Errorf("%s: %v (%v), want no requests", query, got, err)
		}
	}

	// A Prometheus outage, as the metric gates will meet it: queries
	// fail while it is down and answer again once it is back.
	prom.Stop()
	if got, err := prom.Query(t.Context(), errorRatio("bad")); err == nil {
		t.Fatalf("Prometheus is down, yet the query answered %v", got)
	}
	if err := prom.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	prom.WaitFor(t, 30*time.Second, errorRatio("bad"), near(0.2, 0.02))
}

// A rolling update from a good image to an :errors one is counted per
// revision: the Pods running the new spec hash fail 20 %, the old one's
// none, which is what a gate on the new revision compares. Once the old
// revision's last Pod is gone, its series go stale in Prometheus.
func TestARollingUpdateIsCountedPerRevision(t *testing.T) {
	c := shared.Get(t)
	client := c.Client(t)
	ns := c.NamespaceLabeled(t, map[string]string{manifest.ManagedByLabel: manifest.ManagedByValue})
	deploy(t, client, ns, "web", "nginx:1.27", "old", 2)
	prom := promtest.StartForTest(t, promtest.Options{Targets: []string{startSimulator(t, client)}})
	revision := func(hash string) string {
		return fmt.Sprintf(`sum(rate(%[1]s{namespace=%[2]q, spec_hash=%[3]q, code="500"}[10s])) / sum(rate(%[1]s{namespace=%[2]q, spec_hash=%[3]q}[10s]))`,
			trafficsim.RequestsMetric, ns, hash)
	}
	prom.WaitFor(t, 2*time.Minute, revision("old"), near(0, 0))

	deploy(t, client, ns, "web", "nginx:"+trafficsim.ErrorsTag, "new", 2)
	prom.WaitFor(t, 2*time.Minute, revision("new"), near(0.2, 0.03))
	prom.WaitFor(t, 30*time.Second, fmt.Sprintf(`absent(%s{namespace=%q, spec_hash="old"})`, trafficsim.RequestsMetric, ns), near(1, 0))
}

// deploy applies a deployment's StatefulSet exactly as agentd builds and
// applies it (internal/manifest, server-side apply as its field manager).
func deploy(t *testing.T, client kubernetes.Interface, ns, id, image, specHash string, replicas int32) {
	t.Helper()
	d, err := manifest.NewDeployment(&ctrlv1.DeploymentState{DeploymentId: id, Namespace: ns, Image: image, Replicas: replicas,
		SpecHash: specHash, CpuMillicores: 100, MemoryMib: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().StatefulSets(ns).Apply(t.Context(), d.StatefulSet, metav1.ApplyOptions{FieldManager: manifest.FieldManager, Force: true}); err != nil {
		t.Fatalf("apply %s: %v", id, err)
	}
}

// startSimulator runs a simulator against client, serving /metrics on a
// loopback port until the test ends, and returns its host:port.
func startSimulator(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	sim := trafficsim.New(trafficsim.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(sim)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx, client) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simulator: %v", err)
		}
		srv.Close()
	})
	return lis.Addr().String()
}

// near accepts one sample within tolerance of want.
func near(want, tolerance float64) func([]promtest.Sample) error {
	return func(samples []promtest.Sample) error {
		v, err := promtest.Single(samples)
		if err != nil {
			return err
		}
		if math.IsNaN(v) || math.Abs(v-want) > tolerance {
			return fmt.Errorf("%g, want %g ± %g", v, want, tolerance)
		}
		return nil
	}
}

// between accepts one sample in [low, high].
func between(low, high float64) func([]promtest.Sample) error {
	return func(samples []promtest.Sample) error {
		v, err := promtest.Single(samples)
		if err != nil {
			return err
		}
		if !(v >= low && v <= high) {
			return fmt.Errorf("%g, want between %g and %g", v, low, high)
		}
		return nil
	}
}
