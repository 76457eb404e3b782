package rollout_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent/jsontype"
	entrollout "github.com/deploysync/deploysync/ent/rollout"
)

// A rollout whose step keeps failing does not hold up the others in the
// driver's round: they take their steps, and the round says which one
// failed (on MariaDB).
func TestARolloutWhoseStepFailsDoesNotStopTheRound(t *testing.T) {
	db := storetest.New(t)
	s := desired.New(db.Ent)
	ctx := context.Background()
	for _, r := range []string{"eu", "us"} {
		if err := s.EnsureRegion(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waves := jsontype.Strategy{Waves: []jsontype.Wave{{Regions: []string{"eu"}, DeadlineSeconds: 60}, {Regions: []string{"*"}}}}
	for _, id := range []string{"broken", "fine"} {
		if err := s.Deploy(ctx, desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod", Image: "app:1",
			CPUMillicores: 100, MemoryMiB: 64}, []string{"eu", "us"}, 1); err != nil {
			t.Fatal(err)
		}
		v2 := "app:2"
		if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, waves), id, desired.SpecUpdate{Image: &v2}); err != nil {
			t.Fatal(err)
		}
	}
	// The broken one's rollback cannot be written: the spec it returns
	// to has a hash no topology takes.
	if _, err := db.SQL.ExecContext(ctx, "UPDATE rollouts SET from_spec = JSON_SET(from_spec, '$.hash', ?) WHERE deployment_id = 'broken'",
		strings.Repeat("x", 65)); err != nil {
		t.Fatal(err)
	}

	// Past the canaries' deadline, with no agent: both halt and roll back.
	later := time.Now().UTC().Add(time.Hour)
	d := &rollout.Driver{Store: s, Client: db.Ent, DB: db.SQL, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return later }}
	written, err := d.Round(ctx)
	if err == nil || !strings.Contains(err.Error(), "rollout of broken") {
		t.Errorf("the round's error: %v, want the broken rollout's", err)
	}
	if written != 1 {
		t.Errorf("%d steps written, want the fine rollout's", written)
	}
	fine := db.Ent.Rollout.Query().Where(entrollout.DeploymentID("fine")).OnlyX(ctx)
	if fine.State != entrollout.StateRolledBack {
		t.Errorf("the fine rollout is %s after the round, want rolled_back (its canary missed its deadline)", fine.State)
	}
	if r := db.Ent.Rollout.Query().Where(entrollout.DeploymentID("broken")).OnlyX(ctx); r.State != entrollout.StateProgressing {
		t.Errorf("the broken rollout is %s, want progressing (its step failed)", r.State)
	}
}
