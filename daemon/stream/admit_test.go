package stream_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/hook"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A stream whose start panics after it recorded the agent's connection
// (a bug, contained as every panic is: I6) leaves the agent's record as
// it found it: not connected, as the agent is not.
func TestAStreamStartThatPanicsLeavesNoConnectionRecorded(t *testing.T) {
	db := storetest.New(t)
	var boom atomic.Bool
	db.StreamEnt.Agent.Use(func(next ent.Mutator) ent.Mutator {
		return hook.AgentFunc(func(ctx context.Context, m *ent.AgentMutation) (ent.Value, error) {
			v, err := next.Mutate(ctx, m)
			if boom.Load() && m.Op().Is(ent.OpUpdate) {
				if _, connecting := m.ConnectedTo(); connecting {
					panic("a bug after the connection was recorded")
				}
			}
			return v, err
		})
	})
	env := servertest.StartOn(t, db, server.Config{})
	env.AgentToken("eu")
	ctx := context.Background()
	watch := func() error {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := env.Agent("eu").WatchDeploymentChanges(sctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "agent-0"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	// The first stream creates the agent's record; the next updates it.
	if err := watch(); err != nil {
		t.Fatal(err)
	}
	boom.Store(true)
	if err := watch(); err == nil {
		t.Fatal("a stream whose start panicked was served")
	}
	boom.Store(false)
	a, err := db.Ent.Agent.Query().Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.ConnectedTo != "" || a.ConnectedSince != nil {
		t.Errorf("after its stream's start panicked the agent is recorded connected to %q since %v", a.ConnectedTo, a.ConnectedSince)
	}
}
