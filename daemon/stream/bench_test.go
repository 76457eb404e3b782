package stream_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/stream/seed"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/daemon/tailer"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The benchmarks run ctrld with production settings (100 ms polls, 500 ms
// hole grace) against real MariaDB, side by side with the seed algorithm
// (per-stream polls every 0.5-1.5 s, a point lookup per row). Run them
// with `go tool task bench`.

var productionTailer = tailer.Config{PollInterval: 100 * time.Millisecond, HoleGrace: 500 * time.Millisecond, ControlInterval: time.Second}

// benchEnv starts ctrld with cfg (production timings for the fields
// servertest would give test ones) and returns the address that serves
// region "eu" by algo ("stream" or "seed") and a dialer of cluster clients
// for it, each with a token of its own, as each agent has.
func benchEnv(b *testing.B, algo string, cfg server.Config) (*servertest.Env, string, func() ctrlv1.ClusterServiceClient) {
	b.Helper()
	cfg.Tailer = productionTailer
	cfg.TokenRecheck = server.DefaultTokenRecheck
	cfg.Stream.KeepAlive = stream.Defaults.KeepAlive
	env := servertest.Start(b, cfg)
	env.AgentToken("eu") // registers the region
	addr := env.Server.Addr
	if algo == "seed" {
		addr = servertest.ServeWatcher(b, env.DB, &seed.Watcher{DB: env.DB.SQL, Client: env.DB.Ent})
	}
	return env, addr, func() ctrlv1.ClusterServiceClient {
		return ctrlv1.NewClusterServiceClient(servertest.Dial(b, addr, env.AgentToken("eu")))
	}
}

// BenchmarkCommitToReceive measures the time from the start of an
// operator's Scale call (which commits the change) to the agent receiving
// the event, idle and with 16 writers scaling other deployments meanwhile.
func BenchmarkCommitToReceive(b *testing.B) {
	for _, algo := range []string{"stream", "seed"} {
		for _, writers := range []int{0, 16} {
			b.Run(fmt.Sprintf("%s/writers=%d", algo, writers), func(b *testing.B) {
				benchLatency(b, algo, writers, replicas{})
			})
		}
	}
}

// BenchmarkCommitToReceiveAcrossReplicas is BenchmarkCommitToReceive with
// two ctrld replicas on the database and the operator writing through the
// first, with peer pokes (daemon/peers) on or off. Two agents receive every
// probe side by side, one streaming from the replica written through
// (same-*) and one from the other (other-*), so both figures come from the
// same probes under the same load. Without pokes, the other replica hears
// of a change at its next poll (100 ms).
func BenchmarkCommitToReceiveAcrossReplicas(b *testing.B) {
	for _, pokes := range []bool{true, false} {
		for _, writers := range []int{0, 16} {
			b.Run(fmt.Sprintf("pokes=%v/writers=%d", pokes, writers), func(b *testing.B) {
				benchLatency(b, "stream", writers, replicas{two: true, pokes: pokes})
			})
		}
	}
}

// replicas says whether a latency benchmark runs a second ctrld replica
// (with an agent on each, the operator writing through the first), and
// whether the replicas poke each other.
type replicas struct{ two, pokes bool }

func benchLatency(b *testing.B, algo string, writers int, r replicas) {
	var cfg server.Config
	if r.pokes {
		cfg.Peers = peers.Config{AdvertiseAddr: "127.0.0.1"}
	}
	env, addr, _ := benchEnv(b, algo, cfg)
	addrs, names := []string{addr}, []string{""}
	if r.two {
		other := env.StartReplica()
		if r.pokes {
			// Replicas find each other at their next heartbeat.
			deadline := time.Now().Add(30 * time.Second)
			for env.Server.Peers.Peers() != 1 || other.Peers.Peers() != 1 {
				if time.Now().After(deadline) {
					b.Fatal("the replicas did not find each other")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		addrs, names = []string{addr, other.Addr}, []string{"same-", "other-"}
	}
	ctx := context.Background()
	op := env.Operator("bench")
	deploy := func(id string) {
		_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1})
		if err != nil {
			b.Fatal(err)
		}
	}
	deploy("probe")
	for w := range writers {
		deploy(fmt.Sprintf("load-%d", w))
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var probes []*streamtest.Probe
	for i, addr := range addrs {
		client := ctrlv1.NewClusterServiceClient(servertest.Dial(b, addr, env.AgentToken("eu")))
		f := streamtest.New(client, "eu", fmt.Sprintf("bench-agent-%d", i))
		probes = append(probes, streamtest.NewProbe(names[i], f, "probe"))
		wg.Go(func() { f.Run(runCtx) })
		if _, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
			b.Fatal("no full sync")
		}
	}
	for w := range writers {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				op.Scale(runCtx, &ctrlv1.ScaleRequest{DeploymentId: fmt.Sprintf("load-%d", w), Region: "eu", Replicas: int32(1 + i%50)})
			}
		})
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
		// The seed algorithm loses changes under concurrent writers (and
		// falls behind): a probe not seen within 10 s counts as unseen,
		// not as a latency. Each agent is timed from the same start.
		deadline := start.Add(10 * time.Second)
		for _, p := range probes {
			p.Await(want, start, deadline)
		}
		// Spread the probes over the poll cycle.
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
	}
	b.StopTimer()
	stop()
	wg.Wait()
	for _, p := range probes {
		p.Report(b)
	}
}

// BenchmarkIdleQueries counts the statements the database executes per
// second while 1 or 100 agents hold idle streams: the stream's single
// tailer against the seed's poll per stream. Run alone (-benchtime=1x):
// the count is server-wide.
func BenchmarkIdleQueries(b *testing.B) {
	for _, algo := range []string{"stream", "seed"} {
		for _, streams := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/streams=%d", algo, streams), func(b *testing.B) {
				env, _, dial := benchEnv(b, algo, server.Config{})
				ctx, stop := context.WithCancel(context.Background())
				defer stop()
				followers := make([]*streamtest.Follower, streams)
				for i := range followers {
					// Identities repeat: a region admits only so many
					// agents (cluster.Config), and streams are what
					// this counts.
					identity := fmt.Sprintf("agent-%d", i%cluster.Defaults.MaxAgentsPerRegion)
					followers[i] = streamtest.New(dial(), "eu", identity)
					go followers[i].Run(ctx)
				}
				for _, f := range followers {
					if _, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
						b.Fatal("a stream did not sync")
					}
				}
				b.ResetTimer()
				for range b.N {
					b.ReportMetric(statementsPerSecond(b, env), "queries/s")
				}
			})
		}
	}
}

// statementsPerSecond counts the statements the database server executes
// per second over five seconds (server-wide: run alone), the count's own
// statement excluded.
func statementsPerSecond(b *testing.B, env *servertest.Env) float64 {
	b.Helper()
	questions := func() int64 {
		var name string
		var n int64
		if err := env.DB.SQL.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	window := 5 * time.Second
	before := questions()
	time.Sleep(window)
	return float64(questions()-before-1) / window.Seconds()
}
