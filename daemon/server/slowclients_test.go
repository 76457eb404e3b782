package server_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/testmetrics"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fillRegion deploys n deployments to region through the operator API,
// each carrying an env value of size bytes.
func fillRegion(t testing.TB, op ctrlv1.OperatorServiceClient, region string, n, size int) {
	t.Helper()
	payload := strings.Repeat("x", size)
	for i := range n {
		_, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{
			DeploymentId: fmt.Sprintf("app-%03d", i), WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{region}, Replicas: 1,
			Env: map[string]string{"PAYLOAD": payload},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// silentStream is a stream whose client does not read; end cancels it.
type silentStream struct {
	ctrlv1.ClusterService_WatchDeploymentChangesClient
	end context.CancelFunc
}

// slowStreams opens n full-sync streams of region that never read, four
// per agent token (the default limit per token), each on a connection of
// its own (ctrld closes a stalled stream's connection, and with it any
// other stream on it) with 64 KiB flow-control windows: clients that fall
// silent after their first request. It returns once ctrld has begun
// every one's full sync (reg's metrics count them); they end when t does,
// or when ctrld ends them for not reading.
func slowStreams(t testing.TB, env *servertest.Env, reg *prometheus.Registry, region string, n int) []silentStream {
	t.Helper()
	const perToken = 4
	tokens := make([]string, (n+perToken-1)/perToken)
	for i := range tokens {
		tokens[i] = env.AgentToken(region)
	}
	takenUp := func() float64 { return testmetrics.Sum(t, reg, "deploysync_stream_full_syncs_total", "region", region) }
	before := takenUp()
	streams := make([]silentStream, n)
	for i := range streams {
		conn, err := grpc.NewClient(env.Server.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		client := ctrlv1.NewClusterServiceClient(conn)
		ctx, end := context.WithCancel(context.Background())
		t.Cleanup(end)
		s, err := client.WatchDeploymentChanges(ctx,
			// Eight identities: a region admits only so many agents
			// (cluster.Config), and streams are what these tests count.
			&ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: fmt.Sprintf("silent-%d", i%8)},
			grpc.PerRPCCredentials(bearer.Credentials{Token: tokens[i/perToken], Insecure: true}))
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = silentStream{s, end}
	}
	eventually.True(t, time.Minute, fmt.Sprintf("ctrld never took up all %d silent streams", n), func() bool {
		return takenUp() == before+float64(n)
	})
	return streams
}

// Two hundred full-sync streams whose clients never read, with about
// 1 MiB of desired state in their region: while they are open, operator
// views and writes and agent status reports still answer, a healthy agent
// still gets every change, and each of the silent streams is ended once
// its client has read nothing for the send timeout.
func TestNonReadingStreamsNeitherStallCtrldNorStayOpen(t *testing.T) {
	const silent = 200
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg, Stream: stream.Config{SendTimeout: time.Second}})
	agent := env.Agent("eu") // registers the region
	op := env.Operator("alice")
	fillRegion(t, op, "eu", 200, 5<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	healthy := streamtest.New(agent, "eu", "healthy")
	go healthy.Run(ctx)
	if _, ok := healthy.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("the healthy agent did not sync")
	}

	streams := slowStreams(t, env, reg, "eu", silent)
	for round := range 5 {
		open := int(testmetrics.Sum(t, reg, "deploysync_streams", "region", "eu")) - 1
		call := func(what string, f func(ctx context.Context) error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := f(ctx); err != nil {
				t.Fatalf("round %d, %d silent streams open: %s: %v", round, open, what, err)
			}
		}
		call("ListRegions", func(ctx context.Context) error {
			_, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
			return err
		})
		replicas := int32(2 + round)
		call("Scale", func(ctx context.Context) error {
			_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "app-000", Region: "eu", Replicas: replicas})
			return err
		})
		call("ReportAgentStatus", func(ctx context.Context) error {
			_, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "healthy"})
			return err
		})
		if _, ok := healthy.WaitFor(5*time.Second, func(s streamtest.Snapshot) bool {
			return s.View[streamtest.Key{Kind: "deployment", ID: "app-000"}].GetDeployment().GetDeployment().GetReplicas() == replicas
		}); !ok {
			t.Fatalf("round %d, %d silent streams open: the healthy agent did not get the scale to %d", round, open, replicas)
		}
	}

	// Every silent stream is ended: none is left open on ctrld, nor
	// subscribed to the tailer, and each was counted as stalled.
	eventually.True(t, 2*time.Minute, "the silent streams were not all ended", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_stream_stalled_total", "region", "eu") == silent &&
			testmetrics.Sum(t, reg, "deploysync_streams", "region", "eu") == 1 &&
			testmetrics.Sum(t, reg, "deploysync_tailer_subscriptions") == 1
	})
	// A client that reads at last finds its stream gone with its
	// connection: it dials again and resumes.
	for {
		_, err := streams[0].Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the silent stream ended with %v, want Unavailable", err)
			}
			break
		}
	}
}

// Full syncs whose clients do not read hold no database connection while
// they wait: more of them than the streams' pool has connections leave it
// idle, and a healthy agent's stream still gets its changes.
func TestFullSyncsBlockedOnTheirClientsHoldNoConnection(t *testing.T) {
	const silent = 2 * store.StreamConns
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg, Stream: stream.Config{MaxFullSyncs: silent}})
	agent := env.Agent("eu") // registers the region
	op := env.Operator("alice")
	fillRegion(t, op, "eu", 200, 5<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	healthy := streamtest.New(agent, "eu", "healthy")
	go healthy.Run(ctx)
	if _, ok := healthy.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("the healthy agent did not sync")
	}

	slowStreams(t, env, reg, "eu", silent)
	eventually.True(t, time.Minute, "full syncs waiting on their clients hold connections of the streams' pool", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_stream_full_syncs_total", "region", "eu") == silent+1 &&
			env.DB.StreamSQL.Stats().InUse == 0
	})
	if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "app-000", Region: "eu", Replicas: 7}); err != nil {
		t.Fatal(err)
	}
	if _, ok := healthy.WaitFor(5*time.Second, func(s streamtest.Snapshot) bool {
		return s.View[streamtest.Key{Kind: "deployment", ID: "app-000"}].GetDeployment().GetDeployment().GetReplicas() == 7
	}); !ok {
		t.Fatal("the healthy agent did not get the scale")
	}
	if n := testmetrics.Sum(t, reg, "deploysync_streams", "region", "eu"); n != silent+1 {
		t.Fatalf("%v streams open, want the %d silent ones still waiting and the healthy one", n, silent)
	}
}

// A full sync holds one of the MaxFullSyncs slots only while it reads a
// page, never while it waits for its client: with every slot's worth of
// streams silent in the middle of their full syncs, another agent still
// syncs. (Slots held for the whole sync let two slow readers keep every
// region of a ctrld from syncing.)
func TestSilentFullSyncsHoldNoSlot(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg, Stream: stream.Config{MaxFullSyncs: 2}})
	agent := env.Agent("eu") // registers the region
	fillRegion(t, env.Operator("alice"), "eu", 200, 5<<10)
	slowStreams(t, env, reg, "eu", 2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	healthy := streamtest.New(agent, "eu", "healthy")
	go healthy.Run(ctx)
	if _, ok := healthy.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 && len(s.View) == 200 }); !ok {
		t.Fatalf("a healthy agent did not sync beside two silent full syncs (%v waiting for a slot)",
			testmetrics.Sum(t, reg, "deploysync_stream_full_syncs_waiting"))
	}
}

// Streams beyond the limit per token, or beyond the process's limit, are
// refused with ResourceExhausted naming the limit, and leave nothing
// behind; the streams already open serve on, and a stream that ends makes
// room for another.
func TestStreamsBeyondTheLimitsAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{Stream: stream.Config{MaxStreamsPerToken: 2, MaxStreams: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent := env.Agent("eu")
	open := func(client ctrlv1.ClusterServiceClient, identity string) (ctrlv1.ClusterService_WatchDeploymentChangesClient, context.CancelFunc, error) {
		sctx, end := context.WithCancel(ctx)
		s, err := client.WatchDeploymentChanges(sctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: identity})
		if err == nil {
			_, err = s.Recv() // the full sync's bookmark of an empty region, or the refusal
		}
		return s, end, err
	}
	first, endFirst, err := open(agent, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(agent, "b"); err != nil {
		t.Fatal(err)
	}
	_, _, err = open(agent, "refused")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 open streams, the limit per token") {
		t.Fatalf("a third stream of the token: got %v, want ResourceExhausted naming the limit of 2", err)
	}
	if _, _, err := open(env.Agent("eu"), "c"); err != nil {
		t.Fatalf("another token's stream: %v", err)
	}
	_, _, err = open(env.Agent("eu"), "refused-too")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "already serves 3 streams, its limit") {
		t.Fatalf("a fourth stream: got %v, want ResourceExhausted naming the limit of 3", err)
	}

	// The refused streams left nothing behind: no agent record.
	identities, err := env.DB.Ent.Agent.Query().Select("identity").Strings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(identities)
	if want := []string{"a", "b", "c"}; !slices.Equal(identities, want) {
		t.Errorf("agent records %v, want %v", identities, want)
	}

	// The token's first stream still serves: a deploy reaches it.
	if _, err := env.Operator("alice").Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := first.Recv()
		if err != nil {
			t.Fatalf("the token's first stream: %v", err)
		}
		if ev.GetDeployment().GetDeployment().GetDeploymentId() == "api" {
			break
		}
	}
	// Once it ends, the token may open another, within both limits.
	endFirst()
	eventually.True(t, 10*time.Second, "the token's ended stream still counts", func() bool {
		_, end, err := open(agent, "d")
		if err == nil {
			end()
		}
		return err == nil
	})
}

// BenchmarkUnaryLatencyWithSlowStreams reports the p99 latency of an
// operator view (ListRegions) with no streams open and with 200 streams
// whose clients never read full-syncing a region of about 1 MiB.
func BenchmarkUnaryLatencyWithSlowStreams(b *testing.B) {
	for _, silent := range []int{0, 200} {
		b.Run(fmt.Sprintf("silent-streams=%d", silent), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			env := servertest.Start(b, server.Config{Registry: reg})
			env.AgentToken("eu") // registers the region
			op := env.Operator("bench")
			fillRegion(b, op, "eu", 200, 5<<10)
			slowStreams(b, env, reg, "eu", silent)
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := op.ListRegions(context.Background(), &ctrlv1.ListRegionsRequest{}); err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// ctrld sends no message larger than limits.MaxMessageBytes, what its
// clients accept: a resource too large for it (written before the limit
// on resources, or by hand) ends the stream with ResourceExhausted on
// ctrld's side, even for a client that would accept more.
func TestCtrldSendsNoMessageAboveTheLimit(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu") // registers the region
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := map[string]string{"PAYLOAD": strings.Repeat("x", limits.MaxMessageBytes)}
	err := store.WithTx(ctx, env.DB.Ent, func(tx *ent.Tx) error {
		if err := tx.Deployment.Create().SetID("huge").SetWorkspaceID("ws").SetEnvironmentID("prod").
			SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetEnv(huge).Exec(ctx); err != nil {
			return err
		}
		return tx.DeploymentTopology.Create().SetDeploymentID("huge").SetRegion("eu").SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1").SetEnv(huge).Exec(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := env.Agent("eu").WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "a"},
		grpc.MaxCallRecvMsgSize(4*limits.MaxMessageBytes))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("got %v, want ResourceExhausted", err)
			}
			break
		}
		if ev.GetDeployment() != nil {
			t.Fatalf("ctrld sent a message of %d bytes", proto.Size(ev))
		}
	}
}

// Clients that open streams and never read them, waves of a token's limit
// each on a connection they keep open, make ctrld
// keep nothing of them once they ended for not reading: what gRPC had
// queued for a stream (here a large first event) would otherwise stay,
// behind the stream's end, for as long as the connection lasts.
func TestStalledStreamsLeaveNothingQueuedBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg, Stream: stream.Config{SendTimeout: 300 * time.Millisecond}})
	env.AgentToken("eu") // registers the region
	op := env.Operator("alice")
	ctx := context.Background()
	deploy := func(id string, env map[string]string) {
		_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1, Env: env})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The first event of every full sync is 840 KiB; the small ones after
	// it fill the stream's outbox.
	large := map[string]string{}
	for v := range 7 {
		large[fmt.Sprintf("PAYLOAD_%d", v)] = strings.Repeat("x", 120<<10)
	}
	deploy("app-000", large)
	for i := 1; i <= 24; i++ {
		deploy(fmt.Sprintf("app-%03d", i), nil)
	}
	heapInUse := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	stalled := func() float64 { return testmetrics.Sum(t, reg, "deploysync_stream_stalled_total", "region", "eu") }
	live := func() float64 { return testmetrics.Sum(t, reg, "deploysync_streams", "region", "eu") }
	before := heapInUse()

	const waves, perWave = 25, 4 // perWave: the token's stream limit
	for range waves {
		conn, err := grpc.NewClient(env.Server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		client := ctrlv1.NewClusterServiceClient(conn)
		// A token per wave: the last wave's may not have given its
		// places back yet when its streams are seen gone.
		token := env.AgentToken("eu")
		stalledBefore := stalled()
		for i := range perWave {
			streamCtx, end := context.WithCancel(ctx)
			t.Cleanup(end)
			_, err := client.WatchDeploymentChanges(streamCtx,
				&ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: fmt.Sprintf("a-%d", i)},
				grpc.PerRPCCredentials(bearer.Credentials{Token: token, Insecure: true}))
			if err != nil {
				t.Fatal(err)
			}
		}
		eventually.True(t, 30*time.Second, "the wave's streams did not end for not reading", func() bool { return stalled() > stalledBefore && live() == 0 })
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d streams ended for not reading: heap grew %d KiB", waves*perWave, grown>>10)
	if grown > 24<<20 {
		t.Fatalf("ended streams' queued events stayed: the heap grew %d MiB (%d KiB per stream)", grown>>20, grown/(waves*perWave)>>10)
	}
}

// silentClient opens a stream of region from cursor 0 on a connection of
// its own with 64 KiB flow-control windows (the smallest a grpc-go client
// takes), under a new agent token.
func silentClient(t *testing.T, env *servertest.Env, region, identity string) ctrlv1.ClusterService_WatchDeploymentChangesClient {
	t.Helper()
	conn, err := grpc.NewClient(env.Server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	s, err := ctrlv1.NewClusterServiceClient(conn).WatchDeploymentChanges(ctx,
		&ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: identity},
		grpc.PerRPCCredentials(bearer.Credentials{Token: env.AgentToken(region), Insecure: true}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitStalled waits until region's one stream was ended for not reading,
// for at most within, and returns when it saw that.
func waitStalled(t *testing.T, reg *prometheus.Registry, region string, within time.Duration) time.Time {
	t.Helper()
	eventually.True(t, within, "the stream whose client reads nothing is still open", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_stream_stalled_total", "region", region) == 1 &&
			testmetrics.Sum(t, reg, "deploysync_streams", "region", region) == 0
	})
	return time.Now()
}

// A client that reads nothing from cursor 0, on a region whose full sync
// (eight deployments of 120 KiB, about 1 MiB) is more than its windows and
// gRPC's buffer take, is ended about the send timeout after it stopped
// taking data, with no later write to the region. Its full sync is fewer
// events than the stream's queue holds: before, the deadline began only
// once keep-alives had filled the queue, nine keep-alive intervals (90 s)
// later.
func TestAClientThatReadsNothingIsEndedTheSendTimeoutAfterItsWindowsFill(t *testing.T) {
	const timeout = 2 * time.Second
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg,
		Stream: stream.Config{SendTimeout: timeout, KeepAlive: stream.Defaults.KeepAlive}})
	env.AgentToken("eu") // registers the region
	fillRegion(t, env.Operator("alice"), "eu", 8, 120<<10)

	opened := time.Now()
	silentClient(t, env, "eu", "silent")
	// Generous: the deadline only has to come well before the old 90 s.
	ended := waitStalled(t, reg, "eu", timeout+30*time.Second)
	if took := ended.Sub(opened); took < timeout {
		t.Errorf("ended %v after it opened, before the send timeout of %v", took, timeout)
	} else {
		t.Logf("ended %v after it opened (send timeout %v)", took.Round(time.Millisecond), timeout)
	}
}

// A client that reads its full sync and then stops, while only keep-alive
// bookmarks flow (every millisecond here), is ended too: its windows and
// gRPC's buffer for the stream take about 128 KiB of keep-alives, 10 bytes
// each, and the send timeout counts from the last one taken.
func TestAClientThatStopsReadingAfterItsFullSyncIsEnded(t *testing.T) {
	const timeout = time.Second
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg,
		Stream: stream.Config{SendTimeout: timeout, KeepAlive: time.Millisecond}})
	env.AgentToken("eu") // registers the region
	fillRegion(t, env.Operator("alice"), "eu", 3, 1<<10)

	s := silentClient(t, env, "eu", "stops")
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetBookmark().GetFullSyncDone() {
			break
		}
	}
	stopped := time.Now()
	ended := waitStalled(t, reg, "eu", 3*time.Minute)
	if took := ended.Sub(stopped); took < timeout {
		t.Errorf("ended %v after the client stopped reading, before the send timeout of %v", took, timeout)
	} else {
		t.Logf("ended %v after the client stopped reading (send timeout %v)", took.Round(time.Millisecond), timeout)
	}
	// Read at last, the stream is gone with its connection.
	for {
		if _, err := s.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the stream ended with %v, want Unavailable", err)
			}
			break
		}
	}
}
