package desired_test

import (
	"context"
	"errors"
	"testing"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
)

// A database from before regions had their own spec: the migration gives
// each topology its deployment's spec and hash, and writes no change row
// (nothing changes for agents, and a row per resource would make every
// agent re-apply everything at once). A region a rollout has not reached
// keeps its empty spec.
func TestFillTopologySpecsCopiesWhatRegionsRan(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		if err := tx.Deployment.Create().SetID("old").SetWorkspaceID("ws1").SetEnvironmentID("prod").
			SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetEnv(map[string]string{"A": "b"}).Exec(ctx); err != nil {
			return err
		}
		return tx.DeploymentTopology.Create().SetDeploymentID("old").SetRegion("eu-west").SetReplicas(2).Exec(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	before := len(changes(t, client))
	n, err := desired.FillTopologySpecs(ctx, client)
	if err != nil || n != 1 {
		t.Fatalf("filled %d, %v; want the old deployment's one topology", n, err)
	}
	if after := len(changes(t, client)); after != before {
		t.Errorf("the fill wrote %d change rows", after-before)
	}
	old, err := client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID("old")).Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := desired.SpecHash(desired.DeploymentSpec{Image: "app:1", CPUMillicores: 100, MemoryMiB: 64, Port: 8080, Env: map[string]string{"A": "b"}})
	if old.Image != "app:1" || old.Port != 8080 || old.Env["A"] != "b" || old.SpecHash != want {
		t.Errorf("filled topology %+v, want app:1 with hash %s", old, want)
	}
	// A region a new deployment's rollout has not reached keeps its
	// empty spec at the next migrate.
	if err := s.Deploy(desired.WithStrategy(ctx, canaryThenRest), spec("new"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := desired.FillTopologySpecs(ctx, client); err != nil || n != 0 {
		t.Errorf("the next migrate filled %d, %v", n, err)
	}
	if got := images(t, client, "new"); got["us-east"] != "" {
		t.Errorf("a region the rollout has not reached was filled: %v", got)
	}
	// A backfill writes the spec columns and nothing else.
	err = client.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID("old")).SetReplicas(5).
		Exec(changefeed.Backfill(ctx))
	if !errors.Is(err, changefeed.ErrNotActualState) {
		t.Errorf("replicas through a backfill: %v", err)
	}
}

// The hash names what runs: specs that run alike share it, whether an
// empty env is stored as nothing or as {}.
func TestSpecHash(t *testing.T) {
	a := desired.DeploymentSpec{Image: "app:1", CPUMillicores: 100, MemoryMiB: 64, Port: 8080}
	b := a
	b.Env, b.Command, b.ID = map[string]string{}, []string{}, "other"
	if desired.SpecHash(a) != desired.SpecHash(b) {
		t.Error("empty and missing env hash differently")
	}
	for name, change := range map[string]func(*desired.DeploymentSpec){
		"image":   func(s *desired.DeploymentSpec) { s.Image = "app:2" },
		"cpu":     func(s *desired.DeploymentSpec) { s.CPUMillicores = 101 },
		"memory":  func(s *desired.DeploymentSpec) { s.MemoryMiB = 65 },
		"port":    func(s *desired.DeploymentSpec) { s.Port = 9090 },
		"command": func(s *desired.DeploymentSpec) { s.Command = []string{"x"} },
		"env":     func(s *desired.DeploymentSpec) { s.Env = map[string]string{"A": ""} },
	} {
		c := a
		change(&c)
		if desired.SpecHash(c) == desired.SpecHash(a) {
			t.Errorf("a change of %s keeps the hash", name)
		}
	}
	if h := desired.SpecHash(a); len(h) != 16 {
		t.Errorf("hash %q: want 16 hex digits, a valid label value", h)
	}
}

// Once regions have their own specs, an empty one is a region running
// nothing on purpose: a rolled-back new deployment's, whose rollout
// retention may have pruned. A later migrate leaves it empty.
func TestFillTopologySpecsLeavesARolledBackDeployAlone(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("kept"), []string{"eu-west"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Deploy(desired.WithStrategy(ctx, canaryThenRest), spec("failed"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "failed", desired.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	client.Rollout.Delete().ExecX(ctx) // as retention prunes old rollouts
	if n, err := desired.FillTopologySpecs(ctx, client); err != nil || n != 0 {
		t.Fatalf("filled %d, %v; want none", n, err)
	}
	if got := images(t, client, "failed"); got["eu-west"] != "" || got["us-east"] != "" {
		t.Errorf("a rolled-back deployment's regions were given its failed spec: %v", got)
	}
}
