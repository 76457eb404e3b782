package galeracheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/internal/testmariadb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkCommitToReceiveOnGalera measures, on a 3-node Galera cluster
// with a ctrld replica on each node and production timings (100 ms polls),
// the time from the start of an operator's Scale call through replica 1 to
// the event's arrival at two agents side by side: one streaming from
// replica 1 (same node, same-*), one from replica 2 (the other node,
// other-*), with peer pokes on and off.
func BenchmarkCommitToReceiveOnGalera(b *testing.B) {
	g := testmariadb.OwnGalera(b)
	for _, pokes := range []bool{true, false} {
		b.Run(fmt.Sprintf("pokes=%v", pokes), func(b *testing.B) {
			cfg := server.Config{
				Tailer:       tailer.Config{PollInterval: 100 * time.Millisecond, HoleGrace: 500 * time.Millisecond, ControlInterval: time.Second},
				TokenRecheck: server.DefaultTokenRecheck,
				Stream:       stream.Config{KeepAlive: stream.Defaults.KeepAlive},
			}
			if pokes {
				cfg.Peers = peers.Config{AdvertiseAddr: "127.0.0.1"}
			}
			c := startCluster(b, g, cfg)
			if pokes {
				deadline := time.Now().Add(30 * time.Second)
				for c.replicas[0].Server.Peers.Peers() != 2 || c.replicas[1].Server.Peers.Peers() != 2 {
					if time.Now().After(deadline) {
						b.Fatal("the replicas did not find each other")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			benchProbes(b, c)
		})
	}
}

// benchProbes scales a probe deployment through replica 1 b.N times and
// times its arrival at an agent on replica 1 and one on replica 2.
func benchProbes(b *testing.B, c *cluster) {
	ctx := context.Background()
	op := c.replicas[0].Operator("bench")
	token := c.replicas[0].AgentToken("eu") // registers the region
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "probe", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var probes []*streamtest.Probe
	for i, name := range []string{"same-", "other-"} {
		client := ctrlv1.NewClusterServiceClient(servertest.Dial(b, c.replicas[i].Server.Addr, token))
		f := streamtest.New(client, "eu", fmt.Sprintf("bench-agent-%d", i))
		probes = append(probes, streamtest.NewProbe(name, f, "probe"))
		wg.Go(func() { f.Run(runCtx) })
		if _, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
			b.Fatal("no full sync")
		}
	}
	b.ResetTimer()
	for i := range b.N {
		want := int32(2 + i%900)
		for _, p := range probes {
			p.Drain()
		}
		start := time.Now()
		if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "probe", Region: "eu", Replicas: want}); err != nil {
			b.Fatal(err)
		}
		deadline := start.Add(10 * time.Second)
		for _, p := range probes {
			p.Await(want, start, deadline)
		}
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // spread the probes over the poll cycle
	}
	b.StopTimer()
	stop()
	wg.Wait()
	for _, p := range probes {
		p.Report(b)
	}
}
