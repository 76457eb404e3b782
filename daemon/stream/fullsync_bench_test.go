package stream_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream/seed"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkFullSync measures a full sync from cursor 0 of a region with n
// running deployments, ours and the seed algorithm's on the same database,
// one after the other in every iteration (which goes first alternates), so
// that a machine busy with other work weighs on all alike. Ours runs twice:
// "stream" for a client that takes batches (as agentd does), "single" for
// one that does not (an agent older than batches: a message per
// resource). For each it reports:
//
//   - ms/sync: from the stream's start to its full_sync_done bookmark (the
//     seed's: after its last state row), the client having unpacked every
//     batch into its events (rpc.Unbatch, as agentd does);
//   - B/resource: the encoded size of the messages carrying resources (a
//     resource event, or a batch; proto.Size, without gRPC's 5-byte
//     frame), per resource;
//   - cpu-ms/sync: the CPU time this process spent meanwhile, ctrld's and
//     the client's (the database's is its own process's);
//   - db-cpu-ms/sync: the database server's CPU time meanwhile, when
//     DEPLOYSYNC_BENCH_DB_PID names its process on this machine (read from
//     /proc in clock ticks, 10 ms; other clients of the server count too);
//   - peak-live-heap-MiB: the highest live heap (as the garbage collector
//     last measured it) during the sync, above the live heap before it.
//     The client keeps nothing, so this is the server's, and gRPC's
//     buffers on both sides.
//
// and the ratios of our times to the seed's. The seed cannot sync more than
// seedMaxResources. Sizes: DEPLOYSYNC_BENCH_FULLSYNC_SIZES
// (comma-separated, default 10000,60000,100000: the sizes issue 15 names,
// so that `go tool task bench` shows them).
func BenchmarkFullSync(b *testing.B) {
	for _, n := range benchSizes(b, "DEPLOYSYNC_BENCH_FULLSYNC_SIZES", 10000, 60000, 100000) {
		b.Run(fmt.Sprintf("deployments=%d", n), func(b *testing.B) {
			env, addr, _ := benchEnv(b, "stream", server.Config{})
			algos := []*syncTotals{{name: "stream", addr: addr, batches: true}, {name: "single", addr: addr}}
			if n <= seedMaxResources {
				algos = append(algos, &syncTotals{name: "seed",
					addr: servertest.ServeWatcher(b, env.DB, &seed.Watcher{DB: env.DB.SQL, Client: env.DB.Ent})})
			} else {
				b.Logf("the seed cannot sync %d deployments (at most %d): ours alone", n, seedMaxResources)
			}
			for _, a := range algos {
				a.client = ctrlv1.NewClusterServiceClient(servertest.Dial(b, a.addr, env.AgentToken("eu")))
			}
			seedDeployments(b, env.DB, "eu", n)
			awaitTailer(b, env)
			b.ResetTimer()
			for i := range b.N {
				for j := range algos {
					a := algos[(i+j)%len(algos)]
					a.add(fullSyncOnce(b, a.client, fmt.Sprintf("bench-agent-%d", i%4), n, a.batches))
				}
			}
			b.StopTimer()
			for _, a := range algos {
				a.report(b, n)
			}
			if seed := algos[len(algos)-1]; seed.name == "seed" {
				for _, a := range algos[:len(algos)-1] {
					b.ReportMetric(float64(a.elapsed)/float64(seed.elapsed), a.name+"/seed")
				}
			}
			b.ReportMetric(0, "ns/op") // both algorithms' time: meaningless
		})
	}
}

// awaitTailer waits until ctrld's tailer has settled every change written
// so far: a full sync that began before would be sent the rest as live
// changes, its resources twice.
func awaitTailer(b testing.TB, env *servertest.Env) {
	b.Helper()
	newest, err := changelog.NewestVersion(context.Background(), env.DB.SQL)
	if err != nil {
		b.Fatal(err)
	}
	eventually.True(b, time.Minute, fmt.Sprintf("the tailer never reached version %d", newest), func() bool {
		return env.Server.Tailer.Watermark() >= newest
	})
}

// seedMaxResources is the largest region the seed algorithm can sync: it
// reads the deployments of all the region's topologies with one IN list,
// and MariaDB takes at most 65,535 placeholders in a statement.
const seedMaxResources = 65535

// syncTotals adds up one algorithm's full syncs.
type syncTotals struct {
	name    string
	addr    string
	batches bool // the client asks for batches
	client  ctrlv1.ClusterServiceClient
	syncs   int
	elapsed time.Duration
	cpu     time.Duration
	dbCPU   time.Duration
	bytes   int
	peak    uint64
}

func (t *syncTotals) add(f syncFigures) {
	t.syncs++
	t.elapsed += f.elapsed
	t.cpu += f.cpu
	t.dbCPU += f.dbCPU
	t.bytes += f.bytes
	t.peak = max(t.peak, f.peakLiveHeap)
}

func (t *syncTotals) report(b *testing.B, n int) {
	b.ReportMetric(float64(t.elapsed.Microseconds())/1000/float64(t.syncs), t.name+"-ms/sync")
	b.ReportMetric(float64(t.cpu.Microseconds())/1000/float64(t.syncs), t.name+"-cpu-ms/sync")
	b.ReportMetric(float64(t.bytes)/float64(t.syncs*n), t.name+"-B/resource")
	if os.Getenv(dbPIDVar) != "" {
		b.ReportMetric(float64(t.dbCPU.Microseconds())/1000/float64(t.syncs), t.name+"-db-cpu-ms/sync")
	}
	b.ReportMetric(float64(t.peak)/(1<<20), t.name+"-peak-live-heap-MiB")
}

// syncFigures are what fullSyncOnce measured of one full sync.
type syncFigures struct {
	elapsed      time.Duration
	cpu          time.Duration // this process's
	dbCPU        time.Duration // the database server's, if known
	bytes        int           // of the resource events, encoded
	peakLiveHeap uint64        // above the live heap before the sync
}

// fullSyncOnce runs one full sync of a region of n deployments (named as
// seedDeployments names them) as agent identity, from the stream's start
// to its full_sync_done bookmark, and checks that it listed each of them
// once. The client keeps no events, so the heap measured is the server's.
// batches: the client asks for batches, and unpacks them.
func fullSyncOnce(b *testing.B, client ctrlv1.ClusterServiceClient, identity string, n int, batches bool) syncFigures {
	b.StopTimer()
	listed := make([]bool, n)
	runtime.GC()
	before := liveHeap()
	peak := make(chan uint64)
	ctx, stop := context.WithCancel(context.Background())
	defer stop() // on failure
	sampled := make(chan struct{})
	go func() { peak <- samplePeak(sampled); close(peak) }()
	b.StartTimer()

	start, startCPU, startDB := time.Now(), cpuTime(b), dbCPUTime(b)
	stream, err := client.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: identity, Batches: batches})
	if err != nil {
		b.Fatal(err)
	}
	var figures syncFigures
	for count := 0; ; {
		msg, err := stream.Recv()
		if err != nil {
			b.Fatalf("after %d of %d deployments: %v", count, n, err)
		}
		if msg.GetBookmark().GetFullSyncDone() {
			if count != n {
				b.Fatalf("full sync listed %d deployments, want %d", count, n)
			}
			break
		}
		if msg.GetBatch() != nil && !batches {
			b.Fatalf("a batch for a client that did not ask for one")
		}
		figures.bytes += proto.Size(msg) // before Unbatch, which fills the batch's states in
		events, err := rpc.Unbatch(msg)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range events {
			d := ev.GetDeployment()
			if d.GetAction() != ctrlv1.Action_ACTION_APPLY || d.GetDeployment().GetImage() == "" || ev.GetVersion() == 0 {
				b.Fatalf("unexpected event during the full sync: %v", ev)
			}
			i, err := strconv.Atoi(strings.TrimPrefix(d.GetDeployment().GetDeploymentId(), "bulk-"))
			if err != nil || i < 0 || i >= n || listed[i] {
				b.Fatalf("full sync listed %q, unknown or again", d.GetDeployment().GetDeploymentId())
			}
			listed[i] = true
			count++
		}
	}
	figures.elapsed, figures.cpu, figures.dbCPU = time.Since(start), cpuTime(b)-startCPU, dbCPUTime(b)-startDB

	b.StopTimer()
	defer b.StartTimer()
	stop()
	close(sampled)
	if p := <-peak; p > before {
		figures.peakLiveHeap = p - before
	}
	return figures
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dbPIDVar names the database server's process ID, for db-cpu-ms/sync.
const dbPIDVar = "DEPLOYSYNC_BENCH_DB_PID"

// dbCPUTime is the user and system CPU time the database server's process
// (dbPIDVar) has spent so far, 0 when none is named: most of a full sync's
// cost that is not ctrld's is the database's reading the pages.
func dbCPUTime(b *testing.B) time.Duration {
	pid := os.Getenv(dbPIDVar)
	if pid == "" {
		return 0
	}
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatalf("%s: %v", dbPIDVar, err)
	}
	// proc(5): after the command in parentheses, utime and stime are the
	// 12th and 13th fields, in clock ticks (USER_HZ, 100 on Linux).
	stat := string(data)
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(fields) < 13 {
		b.Fatalf("%s: /proc/%s/stat: %q", dbPIDVar, pid, stat)
	}
	var ticks int
	for _, f := range fields[11:13] {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("%s: /proc/%s/stat: %v", dbPIDVar, pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// liveHeap is the live heap as the garbage collector last measured it.
func liveHeap() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// samplePeak returns the highest live heap seen every millisecond until
// done is closed.
func samplePeak(done <-chan struct{}) uint64 {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	peak := liveHeap()
	for {
		select {
		case <-done:
			return max(peak, liveHeap())
		case <-tick.C:
			peak = max(peak, liveHeap())
		}
	}
}

// BenchmarkFullSyncDuringTimeoutSweep measures a full sync of a region of
// n deployments while the deploy workflow fails all n at once (they timed
// out waiting for instances), against the same sync on a quiet database.
// Each iteration runs both, quiet first, so that a machine busy with other
// work weighs on both alike. n: DEPLOYSYNC_BENCH_SWEEP_SIZES (default
// 10000; issue 15 asks 100000).
func BenchmarkFullSyncDuringTimeoutSweep(b *testing.B) {
	for _, n := range benchSizes(b, "DEPLOYSYNC_BENCH_SWEEP_SIZES", 10000) {
		b.Run(fmt.Sprintf("deployments=%d", n), func(b *testing.B) {
			env, _, dial := benchEnv(b, "stream", server.Config{})
			client := dial()
			seedDeployments(b, env.DB, "eu", n)
			awaitTailer(b, env)
			var quiet, during, sweeps time.Duration
			for i := range b.N {
				agent := fmt.Sprintf("bench-agent-%d", i%4)
				quiet += fullSyncOnce(b, client, agent, n, true).elapsed

				// Every deployment unfinished again, and timed out for a
				// driver with a 1 ns timeout (ctrld's own, at 5 minutes,
				// leaves them be).
				err := env.DB.Ent.Deployment.Update().
					SetWorkflowStatus(deployment.WorkflowStatusPending).SetWorkflowError("").
					Exec(changefeed.ActualState(context.Background()))
				if err != nil {
					b.Fatal(err)
				}
				driver := workflow.New(env.DB.Ent, workflow.Config{Timeout: time.Nanosecond}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
				swept := make(chan error, 1)
				start := time.Now()
				go func() { err := driver.Evaluate(context.Background()); sweeps += time.Since(start); swept <- err }()
				during += fullSyncOnce(b, client, agent, n, true).elapsed
				if err := <-swept; err != nil {
					b.Fatal(err)
				}
			}
			per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
			b.ReportMetric(per(quiet), "quiet-ms/sync")
			b.ReportMetric(per(during), "sweep-ms/sync")
			b.ReportMetric(float64(during)/float64(quiet), "sweep/quiet")
			b.ReportMetric(per(sweeps), "ms/sweep")
		})
	}
}

// benchSizes reads a comma-separated list of sizes from the environment
// variable name, defaults when it is not set.
func benchSizes(b *testing.B, name string, defaults ...int) []int {
	s := os.Getenv(name)
	if s == "" {
		return defaults
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s: %q is not a size", name, f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}
