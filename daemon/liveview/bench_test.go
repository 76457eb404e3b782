package liveview_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkLiveLogs is, through a real ctrld on MariaDB and one agent
// connection (a stand-in agent that follows a log as fast as it is read):
//   - first-line: the time from a person's StreamLogs call to its first
//     log line;
//   - commit-to-agent, while logs flow (1.5 s into a follow, at its
//     steady rate) and while they do not: the time from an operator's
//     scale committing to the change reaching the same agent's watch
//     stream, on the connection that carries the log;
//   - log-MiB/s: how fast the follows flowed, first burst included.
//
// p50 and p99 over b.N of each.
func BenchmarkLiveLogs(b *testing.B) {
	env := servertest.Start(b, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	token := env.AgentToken("eu")
	conn := servertest.Dial(b, env.Server.Addr, token)
	agentClient := ctrlv1.NewClusterServiceClient(conn)
	op := env.Operator("bench")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		b.Fatal(err)
	}
	line := strings.Repeat("x", 199) + "\n"
	chunk := strings.Repeat(line, 64<<10/200)
	agent(b, ctx, agentClient, "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		for send(&ctrlv1.LiveAnswerRequest{Log: chunk}) == nil {
		}
	})
	watch, err := agentClient.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "agent-eu"})
	if err != nil {
		b.Fatal(err)
	}
	replicas := make(chan int32, 64)
	go func() {
		for {
			ev, err := watch.Recv()
			if err != nil {
				return
			}
			if d := ev.GetDeployment().GetDeployment(); d != nil {
				replicas <- d.GetReplicas()
			}
		}
	}()
	n := int32(1)
	scaleAndWait := func() time.Duration {
		n = n%50 + 1
		start := time.Now()
		if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "eu", Replicas: n}); err != nil {
			b.Fatal(err)
		}
		for {
			select {
			case got := <-replicas:
				if got == n {
					return time.Since(start)
				}
			case <-time.After(30 * time.Second):
				b.Fatal("the scale did not reach the agent within 30s")
			}
		}
	}
	scaleAndWait() // after the full sync's event
	var first, quiet, flowing []time.Duration
	var logBytes int64
	var logTime time.Duration
	b.ResetTimer()
	for range b.N {
		quiet = append(quiet, scaleAndWait())
		logCtx, stop := context.WithCancel(ctx)
		start := time.Now()
		s, err := op.StreamLogs(logCtx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0", Follow: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			b.Fatal(err)
		}
		first = append(first, time.Since(start))
		done := make(chan int64)
		go func() { // a person reading as fast as they can
			var bytes int64
			for {
				m, err := s.Recv()
				if err != nil {
					done <- bytes
					return
				}
				bytes += int64(len(m.Log))
			}
		}()
		flowed := time.Now()
		time.Sleep(1500 * time.Millisecond) // past the answer's first burst: its steady flow
		flowing = append(flowing, scaleAndWait())
		stop()
		logBytes += <-done
		logTime += time.Since(flowed)
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("first-line", first)
	report("commit-quiet", quiet)
	report("commit-logs", flowing)
	b.ReportMetric(float64(logBytes)/logTime.Seconds()/(1<<20), "log-MiB/s")
}
