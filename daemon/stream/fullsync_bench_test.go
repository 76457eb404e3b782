package stream_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deployment"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkFullSync measures a full sync from cursor 0 of a region with n
// running deployments: from the stream's start to its full_sync_done
// bookmark (the seed's: its last state row), side by side with the seed
// algorithm. Sizes: DEPLOYSYNC_BENCH_FULLSYNC_SIZES (comma-separated,
// default 1000,10000).
func BenchmarkFullSync(b *testing.B) {
	for _, n := range benchSizes(b, "DEPLOYSYNC_BENCH_FULLSYNC_SIZES", 1000, 10000) {
		for _, algo := range []string{"stream", "seed"} {
			b.Run(fmt.Sprintf("%s/deployments=%d", algo, n), func(b *testing.B) {
				env, _, dial := benchEnv(b, algo, server.Config{})
				seedDeployments(b, env.DB, "eu", n)
				b.ResetTimer()
				for i := range b.N {
					fullSyncOnce(b, dial, fmt.Sprintf("bench-agent-%d", i%4), n)
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sync")
			})
		}
	}
}

// fullSyncOnce runs one full sync of a region of n resources as agent
// identity, timed from the stream's start to its full_sync_done bookmark.
func fullSyncOnce(b *testing.B, dial func() ctrlv1.ClusterServiceClient, identity string, n int) {
	f := streamtest.New(dial(), "eu", identity)
	// Told by the bookmark itself: polling the follower's snapshot would
	// copy its view over and over meanwhile.
	synced := make(chan struct{})
	fullSyncDone := sync.OnceFunc(func() { close(synced) }) // a later full sync may come before stop
	f.OnEvent(func(ev *ctrlv1.DeploymentChangeEvent, _ time.Time) {
		if ev.GetBookmark().GetFullSyncDone() {
			fullSyncDone()
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	select {
	case <-synced:
	case <-time.After(5 * time.Minute):
		b.Fatalf("no full sync of %d resources within 5 minutes", n)
	}
	b.StopTimer()
	defer b.StartTimer()
	stop()
	<-done
	if s := f.Snapshot(); len(s.View) != n {
		b.Fatalf("full sync holds %d resources, want %d", len(s.View), n)
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
			seedDeployments(b, env.DB, "eu", n)
			var quiet, during, sweeps time.Duration
			timed := func(f func()) time.Duration { start := time.Now(); f(); return time.Since(start) }
			for i := range b.N {
				agent := fmt.Sprintf("bench-agent-%d", i%4)
				quiet += timed(func() { fullSyncOnce(b, dial, agent, n) })

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
				during += timed(func() { fullSyncOnce(b, dial, agent, n) })
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
