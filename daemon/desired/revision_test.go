package desired_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// revisions returns the deployment's revisions, oldest first.
func revisions(t *testing.T, client *ent.Client, id string) []*ent.DeploymentRevision {
	t.Helper()
	return client.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id)).
		Order(ent.Asc(deploymentrevision.FieldRevision)).AllX(context.Background())
}

// newestChange is the newest change row's pk, 0 when none.
func newestChange(t *testing.T, client *ent.Client) uint64 {
	t.Helper()
	rows := client.DeploymentChange.Query().Order(ent.Desc(deploymentchange.FieldID)).Limit(1).AllX(context.Background())
	if len(rows) == 0 {
		return 0
	}
	return rows[0].ID
}

// Every action that changes a deployment records its whole spec after it,
// who did it, and exactly the stream versions it wrote, even when other
// deployments' changes come in between.
func TestActionsRecordRevisionsWithTheirVersionsAndActor(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithActor(context.Background(), "dana")
	type step struct {
		action string
		run    func() error
	}
	image := "ghcr.io/acme/api:v2"
	steps := []step{
		{"deploy", func() error { return s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 3) }},
		{"scale", func() error { return s.Scale(ctx, "api", "us-east", 4) }},
		{"stop", func() error { return s.SetDesiredStatus(ctx, "api", "eu-west", desired.Stopped) }},
		{"update", func() error {
			_, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &image, Env: map[string]string{"FOO": "1"}})
			return err
		}},
		{"start", func() error { return s.SetDesiredStatus(ctx, "api", "", desired.Running) }},
	}
	type span struct{ first, last uint64 }
	var want []span
	for i, st := range steps {
		// Another deployment's change between two actions: its rows are
		// not this deployment's.
		if err := s.Deploy(ctx, spec(fmt.Sprintf("other-%d", i)), []string{"us-east"}, 1); err != nil {
			t.Fatal(err)
		}
		before := newestChange(t, client)
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.action, err)
		}
		want = append(want, span{before + 1, newestChange(t, client)})
	}
	got := revisions(t, client, "api")
	if len(got) != len(steps) {
		t.Fatalf("%d revisions, want %d", len(got), len(steps))
	}
	for i, r := range got {
		if r.Revision != i+1 || r.Action != steps[i].action || r.Actor != "dana" ||
			r.FirstVersion != want[i].first || r.LastVersion != want[i].last {
			t.Errorf("revision %d: %d %s by %q versions %d..%d; want %d %s by dana versions %d..%d",
				i, r.Revision, r.Action, r.Actor, r.FirstVersion, r.LastVersion, i+1, steps[i].action, want[i].first, want[i].last)
		}
	}
	last := got[len(got)-1]
	if last.Image != image || last.Env["FOO"] != "1" || last.Env["LOG"] != "info" ||
		last.Regions["us-east"].Replicas != 4 || last.Regions["eu-west"].Status != "running" {
		t.Errorf("last revision's spec %+v", last)
	}
	if got := desired.Summarize(got[1], got[2]); got != "stopped in eu-west" {
		t.Errorf("stop's summary %q", got)
	}
}

// A deployment made before revisions has none; its first action starts
// the history at revision 1, and a rollback has nothing before it.
func TestHistoryOfAnOlderDeploymentStartsAtItsNextAction(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west"}, 3); err != nil {
		t.Fatal(err)
	}
	client.DeploymentRevision.Delete().ExecX(ctx) // as if deployed before this version
	if err := s.Scale(ctx, "api", "", 5); err != nil {
		t.Fatal(err)
	}
	got := revisions(t, client, "api")
	if len(got) != 1 || got[0].Revision != 1 || got[0].Action != "scale" || got[0].Regions["eu-west"].Replicas != 5 {
		t.Fatalf("revisions %+v", got)
	}
	if _, _, err := s.Rollback(ctx, "api", 0); !errors.Is(err, desired.ErrNothingToRollBack) {
		t.Fatalf("rollback with no earlier revision: got %v", err)
	}
}

// A rollback restores the spec and the replicas of the revision before (or
// the one asked for), leaves start/stop alone, and writes a change for
// every region agents must apply again; one it cannot do changes nothing.
func TestRollbackRestoresSpecAndReplicas(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rollback(ctx, "api", 0); !errors.Is(err, desired.ErrNothingToRollBack) {
		t.Fatalf("rollback of a new deployment: got %v", err)
	}
	image := "ghcr.io/acme/api:v2"
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &image}); err != nil {
		t.Fatal(err)
	}
	if err := s.Scale(ctx, "api", "us-east", 7); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDesiredStatus(ctx, "api", "eu-west", desired.Stopped); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rollback(ctx, "api", 9); !errors.Is(err, desired.ErrNotFound) {
		t.Fatalf("rollback to an unknown revision: got %v", err)
	}
	if n := len(revisions(t, client, "api")); n != 4 {
		t.Fatalf("refused rollbacks wrote revisions: %d", n)
	}

	before := newestChange(t, client)
	rev, restored, err := s.Rollback(ctx, "api", 1)
	if err != nil || rev != 5 || restored != 1 {
		t.Fatalf("rollback to 1: revision %d restored %d, %v", rev, restored, err)
	}
	dep := client.Deployment.GetX(ctx, "api")
	if dep.Image != spec("api").Image {
		t.Errorf("image %s after rollback", dep.Image)
	}
	us := client.DeploymentTopology.Query().Where(deploymenttopology.Region("us-east")).OnlyX(ctx)
	eu := client.DeploymentTopology.Query().Where(deploymenttopology.Region("eu-west")).OnlyX(ctx)
	if us.Replicas != 3 || eu.DesiredStatus != desired.Stopped {
		t.Errorf("after rollback us-east has %d replicas, eu-west is %s; want 3 and still stopped", us.Replicas, eu.DesiredStatus)
	}
	// The spec in both regions, the replicas in us-east.
	if n := client.DeploymentChange.Query().Where(deploymentchange.IDGT(before)).CountX(ctx); n != 3 {
		t.Errorf("rollback wrote %d change rows, want 3", n)
	}
	r := revisions(t, client, "api")[4]
	if r.Action != "rollback" || r.FirstVersion != before+1 || r.LastVersion != newestChange(t, client) {
		t.Errorf("rollback's revision %+v", r)
	}
}

// Scales and rollbacks of one deployment at once each get their own
// revision number, or are told to retry; none fails otherwise.
func TestConcurrentActionsNumberRevisionsOnce(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Scale(ctx, "api", "", 2); err != nil {
		t.Fatal(err)
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = s.Scale(ctx, "api", "us-east", 3+i)
			} else {
				_, _, errs[i] = s.Rollback(ctx, "api", 1)
			}
		}()
	}
	wg.Wait()
	ok := 2
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, desired.ErrNothingToRollBack):
		default: // ErrConcurrentChange included: the deployment's lock makes it impossible

			t.Errorf("concurrent action failed: %v", err)
		}
	}
	got := revisions(t, client, "api")
	if len(got) != ok {
		t.Fatalf("%d revisions for %d successful actions", len(got), ok)
	}
	for i, r := range got {
		if r.Revision != i+1 {
			t.Fatalf("revision numbers %v", got)
		}
		if i > 0 && r.FirstVersion <= got[i-1].LastVersion {
			t.Errorf("revisions %d and %d claim the same versions", i, i+1)
		}
	}
}

// A new deployment whose first rollout rolled back runs nothing, while
// its own row keeps the spec that failed: the same update again, or a
// rollback to that revision, is a retry, rolled out anew, not refused as
// "nothing to change".
func TestAFailedFirstRolloutCanBeRetried(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithStrategy(context.Background(), jsontype.Strategy{Waves: []jsontype.Wave{
		{Regions: []string{"eu-west"}, BakeSeconds: 60}, {Regions: []string{desired.EveryOtherRegion}}}})
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	image := spec("api").Image
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &image}); err != nil {
		t.Fatalf("the same image again, after the first rollout rolled back: %v", err)
	}
	if got := images(t, client, "api"); got["eu-west"] != image || got["us-east"] != "" {
		t.Fatalf("the retry's first wave: %v", got)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rollback(ctx, "api", 1); err != nil {
		t.Fatalf("a rollback to the first revision, which never ran: %v", err)
	}
	if got := images(t, client, "api"); got["eu-west"] != image {
		t.Fatalf("the rollback's first wave: %v", got)
	}
}
