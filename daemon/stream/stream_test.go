package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func deploySpec(id string) desired.DeploymentSpec {
	return desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod", Image: "app:1", CPUMillicores: 100, MemoryMiB: 64}
}

func follow(t *testing.T, env *servertest.Env, region string) *streamtest.Follower {
	t.Helper()
	return followWith(t, env, region, nil)
}

// followBatched is follow by a follower that takes batches, as agentd does.
func followBatched(t *testing.T, env *servertest.Env, region string) *streamtest.Follower {
	t.Helper()
	return start(t, streamtest.New(env.Agent(region), region, "agent-"+region+"-0").WithBatches(), nil)
}

// followWith is follow with a hook run on every event before it is applied.
func followWith(t *testing.T, env *servertest.Env, region string, onEvent func(*ctrlv1.DeploymentChangeEvent, time.Time)) *streamtest.Follower {
	t.Helper()
	return start(t, streamtest.New(env.Agent(region), region, "agent-"+region+"-0"), onEvent)
}

// start runs f until the test ends, with onEvent (if set) as its hook.
func start(t *testing.T, f *streamtest.Follower, onEvent func(*ctrlv1.DeploymentChangeEvent, time.Time)) *streamtest.Follower {
	t.Helper()
	if onEvent != nil {
		f.OnEvent(onEvent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.Run(ctx); err != nil {
			t.Errorf("follower: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func replicasOf(s streamtest.Snapshot, id string) int32 {
	ev := s.View[streamtest.Key{Kind: "deployment", ID: id}]
	if ev == nil {
		return -1
	}
	return ev.GetDeployment().GetDeployment().GetReplicas()
}

// Full sync then incremental: existing deployments arrive in the full sync,
// later changes (scale, stop, delete) arrive as they commit, and another
// region's changes never do.
func TestFullSyncThenIncremental(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	store := desired.New(env.DB.Ent)
	env.AgentToken("eu") // registers the regions
	env.AgentToken("us")
	for _, id := range []string{"a", "b"} {
		if err := store.Deploy(ctx, deploySpec(id), []string{"eu", "us"}, 2); err != nil {
			t.Fatal(err)
		}
	}

	f := follow(t, env, "eu")
	if _, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool {
		return s.FullSyncs == 1 && len(s.View) == 2
	}); !ok {
		t.Fatalf("full sync did not deliver both deployments: %+v", f.Snapshot())
	}

	must(t, store.Scale(ctx, "a", "eu", 5))
	must(t, store.Deploy(ctx, deploySpec("c"), []string{"eu"}, 1))
	must(t, store.SetDesiredStatus(ctx, "b", "eu", desired.Stopped))
	must(t, store.Deploy(ctx, deploySpec("only-us"), []string{"us"}, 1))
	s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool {
		return replicasOf(s, "a") == 5 && replicasOf(s, "c") == 1 && replicasOf(s, "b") == -1
	})
	if !ok {
		t.Fatalf("incremental changes not applied: %+v", s.View)
	}
	if _, leaked := s.View[streamtest.Key{Kind: "deployment", ID: "only-us"}]; leaked {
		t.Fatal("eu stream delivered a us-only deployment")
	}
	must(t, store.DeleteDeployment(ctx, "a"))
	if s, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "a") == -1 }); !ok {
		t.Fatalf("hard delete did not reach the agent: %+v", s.View)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A stream keeps its agent's record fresh while it lives, heartbeats or
// not: a record nothing refreshed for ten minutes may be given to a new
// identity, and a first full sync may take that long before the agent's
// first heartbeat.
func TestAStreamKeepsItsAgentsRecordFresh(t *testing.T) {
	env := servertest.Start(t, server.Config{Stream: stream.Config{ConnectionRefresh: 50 * time.Millisecond}})
	f := follow(t, env, "eu")
	if _, ok := f.WaitFor(10*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("no full sync")
	}
	if _, err := env.DB.SQL.Exec("UPDATE agents SET updated_at = NOW(6) - INTERVAL 1 HOUR"); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the streaming agent's record never turned fresh", func() bool {
		var staleSeconds float64
		if err := env.DB.SQL.QueryRow("SELECT TIMESTAMPDIFF(SECOND, updated_at, NOW(6)) FROM agents WHERE identity = 'agent-eu-0'").Scan(&staleSeconds); err != nil {
			t.Fatal(err)
		}
		return staleSeconds < 60
	})
}
