package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

var everything = labels.Everything()

// deploymentsHandler routes dispatcher work to the deployment controller.
type deploymentsHandler struct{ deps *reconcile.Deployments }

func (h deploymentsHandler) Handle(ctx context.Context, key dispatch.Key, in dispatch.Intent) error {
	if in.Delete {
		return h.deps.Delete(ctx, key.ID)
	}
	return h.deps.Apply(ctx, in.Event.GetDeployment().GetDeployment())
}

// benchAgent is the agent's apply path (dispatcher with 8 workers,
// deployment controller, informer cache) on the shared test API server,
// with agentd's default client rate limits (QPS 50, burst 100).
func benchAgent(b *testing.B) (*dispatch.Dispatcher, *kubetest.WriteCounter, *reconcile.Cache, string) {
	cluster := shared.Get(b)
	counter := &kubetest.WriteCounter{}
	cfg := counter.Wrap(cluster.Config)
	cfg.QPS, cfg.Burst = 50, 100
	client := kubernetes.NewForConfigOrDie(cfg)
	cache := reconcile.NewCache(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	if err := cache.Start(ctx); err != nil {
		b.Fatal(err)
	}
	d := dispatch.New(deploymentsHandler{reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client))}, slog.New(slog.DiscardHandler), nil)
	go d.Run(ctx, 8)
	return d, counter, cache, cluster.Namespace(b)
}

func event(ns string, i, replicas int) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
		Action: ctrlv1.Action_ACTION_APPLY,
		Deployment: &ctrlv1.DeploymentState{DeploymentId: fmt.Sprintf("d%04d", i), Namespace: ns, Image: "app:1",
			Replicas: int32(replicas), CpuMillicores: 100, MemoryMib: 64, Port: 8080},
	}}}
}

// applyAll queues n deployments and waits until the bookmark after them
// is acknowledged, i.e. every apply is done.
func applyAll(b *testing.B, d *dispatch.Dispatcher, ns string, n, replicas int, version uint64) time.Duration {
	start := time.Now()
	for i := range n {
		if err := d.Event(event(ns, i, replicas)); err != nil {
			b.Fatal(err)
		}
	}
	d.Bookmark(version)
	for d.Acked() < version {
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// BenchmarkApplyThroughput: new deployments (a Service and a StatefulSet
// each) applied per second.
func BenchmarkApplyThroughput(b *testing.B) {
	d, counter, _, ns := benchAgent(b)
	const n = 200
	var total time.Duration
	for i := range b.N {
		total += applyAll(b, d, ns, n, 1+i, uint64(i+1))
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "deployments/s")
	b.ReportMetric(float64(counter.Writes())/float64(n*b.N), "writes/deployment")
}

// BenchmarkNoOpResync: a full resync of 1,000 unchanged deployments.
func BenchmarkNoOpResync(b *testing.B) {
	d, counter, cache, ns := benchAgent(b)
	const n = 1000
	applyAll(b, d, ns, n, 1, 1)
	for { // the cache must hold what was applied, as it would at the next resync
		sets, _ := cache.StatefulSets.StatefulSets(ns).List(everything)
		if len(sets) == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := counter.Writes()
	b.ResetTimer()
	var total time.Duration
	for i := range b.N {
		total += applyAll(b, d, ns, n, 1, uint64(i+2))
	}
	b.StopTimer()
	b.ReportMetric(float64(counter.Writes()-before)/float64(b.N), "writes/resync")
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/resync")
}
