package stream_test

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/testmetrics"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// runningInDB is the region's desired view: running deployments and their
// replicas.
func runningInDB(t *testing.T, db *store.DB, region string) map[string]int32 {
	t.Helper()
	tops, err := db.Ent.DeploymentTopology.Query().
		Where(deploymenttopology.Region(region), deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning)).
		All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, tp := range tops {
		out[tp.DeploymentID] = int32(tp.Replicas)
	}
	return out
}

func viewOf(s streamtest.Snapshot) map[string]int32 {
	out := map[string]int32{}
	for k, ev := range s.View {
		if k.Kind == "deployment" {
			out[k.ID] = ev.GetDeployment().GetDeployment().GetReplicas()
		}
	}
	return out
}

func sameView(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffView(want, got map[string]int32) string {
	var missing, extra, wrong int
	for k, v := range want {
		switch w, ok := got[k]; {
		case !ok:
			missing++
		case w != v:
			wrong++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	return fmt.Sprintf("%d missing, %d extra, %d with wrong replicas (want %d, agent has %d)", missing, extra, wrong, len(want), len(got))
}

// seedDeployments creates n deployments in region, a thousand per
// transaction.
func seedDeployments(t testing.TB, db *store.DB, region string, n int) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		err := store.WithTx(ctx, db.Ent, func(tx *ent.Tx) error {
			var deps []*ent.DeploymentCreate
			var tops []*ent.DeploymentTopologyCreate
			for i := start; i < min(n, start+1000); i++ {
				id := fmt.Sprintf("bulk-%05d", i)
				deps = append(deps, tx.Deployment.Create().SetID(id).SetWorkspaceID("ws").SetEnvironmentID("prod").
					SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).
					SetWorkflowStatus(deployment.WorkflowStatusReady)) // the deploy workflow leaves them be
				tops = append(tops, tx.DeploymentTopology.Create().SetDeploymentID(id).SetRegion(region).SetNamespace(naming.Namespace("ws", "prod")).SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1"))
			}
			if err := tx.Deployment.CreateBulk(deps...).Exec(ctx); err != nil {
				return err
			}
			return tx.DeploymentTopology.CreateBulk(tops...).Exec(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Invariant I3: resources created, stopped, scaled and deleted while a
// full sync of 10,000 streams; after the full_sync_done bookmark and the
// incremental tail, the agent's view equals the database. For an agent
// that takes batches and for one that does not.
func TestFullSyncOfTenThousandStaysConsistentWithConcurrentChanges(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprint("batches=", batches), func(t *testing.T) { fullSyncOfTenThousandWithConcurrentChanges(t, batches) })
	}
}

func fullSyncOfTenThousandWithConcurrentChanges(t *testing.T, batches bool) {
	// Small pages: more of them, so more changes land between pages, and
	// the sync lasts long enough for the writers' changes to meet it (a
	// batched sync of 10,000 in pages of 50 met only 17 of one writer's
	// under a loaded CI machine).
	env := servertest.Start(t, server.Config{Stream: stream.Config{PageSize: 20}})
	env.AgentToken("eu")
	seedDeployments(t, env.DB, "eu", 10000)
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()

	follow := follow
	if batches {
		follow = followBatched
	}
	f := follow(t, env, "eu")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops, opsDuringSync atomic.Int64
	for w := range 4 { // writers at once, as several operators and workflows write
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(w)))
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("bulk-%05d", rng.IntN(10000))
				var err error
				switch i % 4 {
				case 0:
					err = ds.Deploy(ctx, deploySpec(fmt.Sprintf("new-%d-%d", w, i)), []string{"eu"}, 2)
				case 1:
					err = ds.SetDesiredStatus(ctx, id, "eu", desired.Stopped)
				case 2:
					err = ds.Scale(ctx, id, "eu", 3)
				case 3:
					err = ds.DeleteDeployment(ctx, id)
				}
				if err == nil {
					ops.Add(1)
				}
			}
		})
	}
	if _, ok := f.WaitFor(60*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("full sync did not finish")
	}
	opsDuringSync.Store(ops.Load())
	time.Sleep(200 * time.Millisecond) // changes keep coming after the bookmark
	close(stop)
	wg.Wait()

	want := runningInDB(t, env.DB, "eu")
	s, ok := f.WaitFor(20*time.Second, func(s streamtest.Snapshot) bool { return sameView(want, viewOf(s)) })
	t.Logf("%d concurrent changes during the full sync, %d in all; %d events received", opsDuringSync.Load(), ops.Load(), s.Received)
	if !ok {
		t.Fatalf("agent view differs from the database: %s", diffView(want, viewOf(s)))
	}
	if n := opsDuringSync.Load(); n < 20 {
		t.Fatalf("only %d changes committed while the full sync ran", n)
	}
}

// Invariant I5: a cursor older than what retention kept gets
// resync_required, never a silent skip; the agent resyncs and converges.
func TestCursorOlderThanRetentionGetsResyncRequired(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	must(t, ds.Deploy(ctx, deploySpec("a"), []string{"eu"}, 1))

	f := streamtest.New(env.Agent("eu"), "eu", "agent-0")
	runFor(t, f, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 && s.Cursor > 0 })

	// While the agent is away: changes, then retention deletes them all.
	must(t, ds.Scale(ctx, "a", "eu", 4))
	must(t, ds.Deploy(ctx, deploySpec("b"), []string{"eu"}, 1))
	cleaner := retention.New(env.DB.SQL, retention.Config{TTL: time.Nanosecond}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	// Retention never passes the persisted watermark (written every second).
	var deleted int64
	eventually.True(t, 5*time.Second, "retention never deleted the three changes", func() bool {
		n, err := cleaner.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		return deleted >= 3
	})

	s := runFor(t, f, func(s streamtest.Snapshot) bool { return s.Resyncs == 1 && s.FullSyncs == 2 })
	if want := runningInDB(t, env.DB, "eu"); !sameView(want, viewOf(s)) {
		t.Fatalf("after the resync: %s", diffView(want, viewOf(s)))
	}
}

// A cursor ahead of everything the database has issued (the database was
// restored from a backup or failed over to a replica that lost the newest
// transactions, while the agent kept its cursor) gets resync_required:
// served incrementally, every change written since would sort below the
// cursor and be skipped as seen.
func TestCursorAheadOfTheDatabaseGetsResyncRequired(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	must(t, ds.Deploy(ctx, deploySpec("a"), []string{"eu"}, 1))

	s, err := env.Agent("eu").WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{
		Region: "eu", AgentIdentity: "agent-0", VersionLastSeen: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := ev.GetResyncRequired(); r == nil || !strings.Contains(r.GetReason(), "ahead of this database") {
		t.Fatalf("cursor from another history: got %v, want resync_required saying so", ev)
	}
}

// An agent that reconnects before its old stream is noticed gone stays
// connected when the old stream finally ends: the old stream's disconnect
// must not clear the new stream's record (the console would show the agent
// down while it streams).
func TestOldStreamEndingKeepsTheNewConnection(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := servertest.Start(t, server.Config{Registry: reg})
	env.AgentToken("eu")
	ctx := context.Background()
	open := func() context.CancelFunc {
		sctx, cancel := context.WithCancel(ctx)
		s, err := env.Agent("eu").WatchDeploymentChanges(sctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "agent-0"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		return cancel
	}
	endOld := open()
	endNew := open()
	defer endNew()
	endOld()
	// The stream gauge falls back to 1 after the old stream's cleanup ran.
	eventually.True(t, 10*time.Second, "the server never ended the old stream", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_streams") == 1
	})
	a, err := env.DB.Ent.Agent.Query().Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.ConnectedTo == "" || a.ConnectedSince == nil {
		t.Fatalf("the old stream's end cleared the new stream's connection record: %+v", a)
	}
}

// An operator's forced resync reaches a connected agent at once, and an
// agent that was away when it was forced on its next connect.
func TestForcedResync(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	op := env.Operator("alice")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	must(t, ds.Deploy(ctx, deploySpec("a"), []string{"eu"}, 1))

	f := follow(t, env, "eu")
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 })
	if _, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 2 }); !ok || s.Resyncs != 1 {
		t.Fatalf("connected agent did not resync: %+v", s)
	}

	away := streamtest.New(env.Agent("eu"), "eu", "agent-away")
	runFor(t, away, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 && s.Cursor > 0 })
	if _, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu"}); err != nil {
		t.Fatal(err)
	}
	s := runFor(t, away, func(s streamtest.Snapshot) bool { return s.FullSyncs == 2 })
	if s.Resyncs != 1 {
		t.Fatalf("agent that was away: %d resyncs", s.Resyncs)
	}
}

// Pausing a region holds its changes back; resuming delivers them.
func TestPauseHoldsChangesUntilResume(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	op := env.Operator("bob")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	must(t, ds.Deploy(ctx, deploySpec("a"), []string{"eu"}, 1))
	f := follow(t, env, "eu")
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 })

	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	must(t, ds.Scale(ctx, "a", "eu", 7))
	if s, held := f.WaitFor(time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "a") == 7 }); held {
		t.Fatalf("paused region received a change: %+v", s.View)
	}
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: false}); err != nil {
		t.Fatal(err)
	}
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "a") == 7 }); !ok {
		t.Fatalf("change not delivered after resume: %+v", s.View)
	}
}

// ctrld restarts while changes are being written: the agent reconnects
// from its last bookmark and ends up with everything.
func TestCtrldRestartMidStreamLosesNothing(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	f := follow(t, env, "eu")
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 })

	for i := range 60 {
		must(t, ds.Deploy(ctx, deploySpec(fmt.Sprintf("d%d", i)), []string{"eu"}, 1+i%5))
		if i == 30 {
			env.Restart()
		}
	}
	want := runningInDB(t, env.DB, "eu")
	s, ok := f.WaitFor(20*time.Second, func(s streamtest.Snapshot) bool { return sameView(want, viewOf(s)) })
	if !ok {
		t.Fatalf("after restart: %s", diffView(want, viewOf(s)))
	}
	if s.Reconnects == 0 {
		t.Fatal("the agent never reconnected; the restart proved nothing")
	}
	if s.FullSyncs != 1 {
		t.Fatalf("the agent resumed with %d full syncs; it should have resumed incrementally", s.FullSyncs)
	}
}

// runFor runs f until cond holds, then stops it; it returns the snapshot.
// mustWait waits for cond on a running follower, failing the test if it
// does not hold in time.
func mustWait(t *testing.T, f *streamtest.Follower, within time.Duration, cond func(streamtest.Snapshot) bool) streamtest.Snapshot {
	t.Helper()
	s, ok := f.WaitFor(within, cond)
	if !ok {
		t.Fatalf("condition not reached within %s: %+v", within, s)
	}
	return s
}

func runFor(t *testing.T, f *streamtest.Follower, cond func(streamtest.Snapshot) bool) streamtest.Snapshot {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	s, ok := f.WaitFor(15*time.Second, cond)
	cancel()
	<-done
	if !ok {
		t.Fatalf("condition not reached: %+v", s)
	}
	return s
}

// Pause and forced resync live in the database: an agent streaming from
// one ctrld replica honours them when an operator acts through another.
func TestAnotherReplicaHonoursPauseAndResync(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	token := env.AgentToken("eu")
	op := env.Operator("alice") // talks to the first replica
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	must(t, ds.Deploy(ctx, deploySpec("a"), []string{"eu"}, 1))

	replica := env.StartReplica()
	f := streamtest.New(ctrlv1.NewClusterServiceClient(servertest.Dial(t, replica.Addr, token)), "eu", "agent-0")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go f.Run(runCtx)
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 })

	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	// Wait until the replica has read the pause (every 100 ms in tests).
	eventually.True(t, 10*time.Second, "the other replica never read the pause", func() bool {
		sub, err := replica.Tailer.Subscribe(ctx, "eu")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		return sub.Control.Paused
	})
	must(t, ds.Scale(ctx, "a", "eu", 9))
	if _, got := f.WaitFor(time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "a") == 9 }); got {
		t.Fatal("the other replica streamed to a paused region")
	}
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: false}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "a") == 9 }); !ok {
		t.Fatal("change not delivered after resume through the other replica")
	}
	if _, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 2 }); !ok {
		t.Fatal("forced resync through one replica did not reach a stream on the other")
	}
}

// Invariant I4 for sentinels and policies: a stopped sentinel and a
// deleted sentinel or policy become deletes.
func TestSentinelAndPolicyDeletesPropagate(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	sen := desired.SentinelSpec{ID: "sen", WorkspaceID: "ws", EnvironmentID: "prod", Region: "eu", Image: "s:1", Replicas: 1, CPUMillicores: 1, MemoryMiB: 1}
	if _, err := ds.EnsureSentinel(ctx, sen); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.EnsureCiliumPolicy(ctx, desired.PolicySpec{ID: "pol", WorkspaceID: "ws", EnvironmentID: "prod", Region: "eu",
		Name: "allow", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}); err != nil {
		t.Fatal(err)
	}
	f := follow(t, env, "eu")
	has := func(s streamtest.Snapshot, kind, id string) bool {
		_, ok := s.View[streamtest.Key{Kind: kind, ID: id}]
		return ok
	}
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool {
		return has(s, "sentinel", "sen") && has(s, "cilium_network_policy", "pol")
	}); !ok {
		t.Fatalf("full sync: %+v", s.View)
	}
	sen.Stopped = true
	if _, err := ds.EnsureSentinel(ctx, sen); err != nil {
		t.Fatal(err)
	}
	must(t, ds.DeleteCiliumPolicy(ctx, "pol"))
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool {
		return !has(s, "sentinel", "sen") && !has(s, "cilium_network_policy", "pol")
	}); !ok {
		t.Fatalf("stop and delete did not reach the agent: %+v", s.View)
	}
	sen.Stopped = false
	if _, err := ds.EnsureSentinel(ctx, sen); err != nil {
		t.Fatal(err)
	}
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return has(s, "sentinel", "sen") })
	must(t, ds.DeleteSentinel(ctx, "sen"))
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return !has(s, "sentinel", "sen") }); !ok {
		t.Fatalf("hard delete of a sentinel did not reach the agent: %+v", s.View)
	}
}

// A pause during a large full sync holds live changes back without losing
// them: after the resume the agent's view equals the database.
func TestPauseDuringFullSyncLosesNothing(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	op := env.Operator("alice")
	seedDeployments(t, env.DB, "eu", 5000)
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()

	// A slow agent (0.5 ms per event): the 5,000-row full sync takes
	// seconds, so the pause surely lands in the middle of it.
	f := followWith(t, env, "eu", func(*ctrlv1.DeploymentChangeEvent, time.Time) { time.Sleep(500 * time.Microsecond) })
	mustWait(t, f, 10*time.Second, func(s streamtest.Snapshot) bool { return s.Received > 100 })
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	if s := f.Snapshot(); s.FullSyncs != 0 {
		t.Fatalf("the full sync finished (%d events) before the pause: the test no longer pauses during one", s.Received)
	}
	for i := range 20 {
		must(t, ds.Scale(ctx, fmt.Sprintf("bulk-%05d", i), "eu", 7))
		must(t, ds.Deploy(ctx, deploySpec(fmt.Sprintf("paused-%d", i)), []string{"eu"}, 2))
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: false}); err != nil {
		t.Fatal(err)
	}
	want := runningInDB(t, env.DB, "eu")
	if s, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return sameView(want, viewOf(s)) }); !ok {
		t.Fatalf("after pause and resume during a full sync: %s", diffView(want, viewOf(s)))
	}
}
