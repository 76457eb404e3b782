package stream_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkFullSync measures a full sync from cursor 0 of a region with n
// running deployments: from the stream's start to its full_sync_done
// bookmark (the seed's: its last state row), side by side with the seed
// algorithm. Sizes: DEPLOYSYNC_BENCH_FULLSYNC_SIZES (comma-separated,
// default 1000,10000).
func BenchmarkFullSync(b *testing.B) {
	sizes := []int{1000, 10000}
	if s := os.Getenv("DEPLOYSYNC_BENCH_FULLSYNC_SIZES"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("DEPLOYSYNC_BENCH_FULLSYNC_SIZES: %q is not a size", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		for _, algo := range []string{"stream", "seed"} {
			b.Run(fmt.Sprintf("%s/deployments=%d", algo, n), func(b *testing.B) {
				env, _, dial := benchEnv(b, algo, server.Config{})
				seedDeployments(b, env.DB, "eu", n)
				b.ResetTimer()
				for i := range b.N {
					f := streamtest.New(dial(), "eu", fmt.Sprintf("bench-agent-%d", i%4))
					// Told by the bookmark itself: polling the follower's
					// snapshot would copy its view over and over meanwhile.
					synced := make(chan struct{})
					f.OnEvent(func(ev *ctrlv1.DeploymentChangeEvent, _ time.Time) {
						if ev.GetBookmark().GetFullSyncDone() {
							close(synced)
						}
					})
					ctx, stop := context.WithCancel(context.Background())
					done := make(chan struct{})
					go func() { defer close(done); f.Run(ctx) }()
					select {
					case <-synced:
					case <-time.After(5 * time.Minute):
						b.Fatalf("no full sync of %d deployments within 5 minutes", n)
					}
					b.StopTimer()
					stop()
					<-done
					if s := f.Snapshot(); len(s.View) != n {
						b.Fatalf("full sync holds %d resources, want %d", len(s.View), n)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sync")
			})
		}
	}
}
