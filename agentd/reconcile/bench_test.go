package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/naming"
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
// with the given client rate limits (agentd's defaults: QPS 50, burst
// 100). Its requests are counted, the informers' included.
func benchAgent(b *testing.B, qps float32, burst int) (*dispatch.Dispatcher, *requests, *reconcile.Cache) {
	cluster := shared.Get(b)
	counted := &requests{}
	cfg := restclient.CopyConfig(cluster.Config)
	cfg.Wrap(counted.wrap)
	cfg.QPS, cfg.Burst = qps, burst
	client := kubernetes.NewForConfigOrDie(cfg)
	cache := reconcile.NewCache(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	if err := cache.Start(ctx); err != nil {
		b.Fatal(err)
	}
	d := dispatch.New(deploymentsHandler{reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client, naming.Reserved{}))}, slog.New(slog.DiscardHandler), nil)
	go d.Run(ctx, 8)
	return d, counted, cache
}

func event(ns string, i, replicas int) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
		Action: ctrlv1.Action_ACTION_APPLY,
		Deployment: &ctrlv1.DeploymentState{DeploymentId: fmt.Sprintf("d%07d", i), Namespace: ns, Image: "app:1",
			Replicas: int32(replicas), CpuMillicores: 100, MemoryMib: 64, Port: 8080},
	}}}
}

// fresh numbers BenchmarkApplyThroughput's deployments, above
// BenchmarkNoOpResync's: an ID the process used before in another
// namespace (the test API server never finishes deleting a namespace, as
// no namespace controller runs) would be a move, and cost a list and a
// delete per object.
var fresh = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(1_000_000)
	return &n
}()

// applyAll queues deployments [from, from+n) and waits until the bookmark
// after them is acknowledged, i.e. every apply is done.
func applyAll(b *testing.B, d *dispatch.Dispatcher, ns string, from, n, replicas int, version uint64) time.Duration {
	start := time.Now()
	for i := from; i < from+n; i++ {
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
// each) created per second at agentd's default client rate limit and at
// QPS 100 / burst 200, the requests each took, and the share of what the
// rate limit allowed over the run (burst + QPS × time) that became writes.
// Each iteration creates 400 deployments not seen before.
func BenchmarkApplyThroughput(b *testing.B) {
	for _, limit := range []struct {
		qps   float32
		burst int
	}{{50, 100}, {100, 200}} {
		b.Run(fmt.Sprintf("qps=%v,burst=%d", limit.qps, limit.burst), func(b *testing.B) {
			d, counted, _ := benchAgent(b, limit.qps, limit.burst)
			ns := ownedNamespace(b, shared.Get(b))
			reads0, writes0 := counted.reads.Load(), counted.writes.Load()
			const n = 400
			var total time.Duration
			for i := range b.N {
				total += applyAll(b, d, ns, int(fresh.Add(n))-n, n, 1, uint64(i+1))
			}
			reads, writes := counted.reads.Load()-reads0, counted.writes.Load()-writes0
			allowed := float64(limit.burst) + float64(limit.qps)*total.Seconds()
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "deployments/s")
			b.ReportMetric(float64(reads)/float64(n*b.N), "reads/deployment")
			b.ReportMetric(float64(writes)/float64(n*b.N), "writes/deployment")
			b.ReportMetric(100*float64(writes)/allowed, "%limit-as-writes")
		})
	}
}

// resyncSize is how many deployments BenchmarkNoOpResync resyncs
// (DEPLOYSYNC_BENCH_RESYNC, default 10,000).
func resyncSize(b *testing.B) int {
	if s := os.Getenv("DEPLOYSYNC_BENCH_RESYNC"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("DEPLOYSYNC_BENCH_RESYNC=%q: %v", s, err)
		}
		return n
	}
	return 10000
}

// resyncSetup creates BenchmarkNoOpResync's deployments once per run:
// creating 10,000 on the test API server takes minutes.
var resyncSetup struct {
	once sync.Once
	ns   string
	took time.Duration
}

// BenchmarkNoOpResync: a full resync of unchanged deployments (10,000 by
// default, see resyncSize): wall time, the agent process's CPU time
// (user + system, from getrusage; the API server runs in a process of its
// own) and writes, which must be 0, of the first resync of a started agent
// (first-ms, first-cpu-ms) and of the next ones. setup-s is how long creating them took
// (once per run, by an agent at QPS 1000 / burst 2000), sync-s how long the
// informer cache took to list them.
func BenchmarkNoOpResync(b *testing.B) {
	n := resyncSize(b)
	resyncSetup.once.Do(func() {
		d, _, _ := benchAgent(b, 1000, 2000)
		// Not Namespace(b): that goes when b ends, and the benchmark
		// runs more than once.
		resyncSetup.ns = fmt.Sprintf("bench-resync-%d", time.Now().UnixNano())
		resyncSetup.took = applyAll(b, d, resyncSetup.ns, 0, n, 1, 1)
	})
	ns := resyncSetup.ns
	start := time.Now()
	d, counted, cache := benchAgent(b, 50, 100)
	for { // the cache must hold what was applied, as it would at the next resync
		sets, _ := cache.StatefulSets.StatefulSets(ns).List(everything)
		svcs, _ := cache.Services.Services(ns).List(everything)
		if len(sets) == n && len(svcs) == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	synced := time.Since(start)
	writes0 := counted.writes.Load()
	// The first resync is an agent's first full sync after it starts: it
	// compares every object; the next ones compare none (Cache.upToDate).
	stop := profile(b, "first")
	cpu0 := cpuTime(b)
	first := applyAll(b, d, ns, 0, n, 1, 1)
	firstCPU := cpuTime(b) - cpu0
	stop()
	b.ResetTimer()
	stop = profile(b, "later")
	cpu0 = cpuTime(b)
	var total time.Duration
	for i := range b.N {
		total += applyAll(b, d, ns, 0, n, 1, uint64(i+2))
	}
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	stop()
	b.ReportMetric(float64(n), "deployments")
	b.ReportMetric(float64(counted.writes.Load()-writes0)/float64(b.N+1), "writes/resync")
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/resync")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/resync")
	b.ReportMetric(first.Seconds()*1000, "first-ms")
	b.ReportMetric(firstCPU.Seconds()*1000, "first-cpu-ms")
	b.ReportMetric(resyncSetup.took.Seconds(), "setup-s")
	b.ReportMetric(synced.Seconds(), "sync-s")
}

// profile writes a CPU profile of what runs until stop is called to
// DEPLOYSYNC_BENCH_PROFILE_DIR/name.prof, if that is set: go test's
// -cpuprofile would mix in the minute of setup.
func profile(b *testing.B, name string) (stop func()) {
	dir := os.Getenv("DEPLOYSYNC_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".prof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
