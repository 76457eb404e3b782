package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/region"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A pending change says what it changes in its region and who made it;
// one without a revision says what is known now: the desired state, or
// "deleted".
func TestPendingChangesSayWhatTheyChange(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()
	if _, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "ws", EnvironmentId: "prod",
		Region: "eu", Image: "sentinel:1", Replicas: 2, CpuMillicores: 10, MemoryMib: 16}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "gone"} {
		r := deployRequest()
		r.DeploymentId = id
		if _, err := op.Deploy(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// "old" as if deployed before ctrld recorded revisions.
	env.DB.Ent.DeploymentRevision.Delete().Where(deploymentrevision.DeploymentID("old")).ExecX(ctx)
	if _, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "gone"}); err != nil {
		t.Fatal(err)
	}

	pending := func(region string) string {
		t.Helper()
		r, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: region})
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, c := range r.Changes {
			lines = append(lines, fmt.Sprintf("%s/%s: %s (%s)", c.Kind, c.ResourceId, c.Summary, c.Actor))
		}
		return strings.Join(lines, "\n")
	}
	want := strings.Join([]string{
		"deployment/api: created (dana)",
		"deployment/api: image app:1 -> app:2; env FOO added (dana)",
		"deployment/api: stopped (dana)",
		"sentinel/gw: desired: running, 2 replicas, sentinel:1 ()",
		"deployment/old: desired: running, 1 replicas, app:1 ()",
		"deployment/gone: deleted ()",
		"deployment/gone: deleted ()",
	}, "\n")
	if got := pending("eu"); got != want {
		t.Errorf("eu's pending changes:\n%s\nwant:\n%s", got, want)
	}
	want = strings.Join([]string{
		"deployment/api: created (dana)",
		"deployment/api: replicas 3 -> 4 (dana)",
		"deployment/api: image app:1 -> app:2; env FOO added (dana)",
	}, "\n")
	if got := pending("us"); got != want {
		t.Errorf("us's pending changes:\n%s\nwant:\n%s", got, want)
	}
}

// A pause records when it began, a second pause keeps that time, and a
// resume clears it.
func TestPauseRecordsSinceWhen(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()
	pausedAt := func() string {
		r := env.DB.Ent.Region.Query().Where(region.ID("eu")).OnlyX(ctx)
		if r.PausedAt == nil {
			return "never"
		}
		return r.PausedAt.String()
	}
	pause := func(paused bool) {
		t.Helper()
		if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: paused}); err != nil {
			t.Fatal(err)
		}
	}
	pause(true)
	first := pausedAt()
	if first == "never" {
		t.Fatal("a pause did not record when it began")
	}
	pause(true)
	if again := pausedAt(); again != first {
		t.Errorf("a second pause moved paused_at from %s to %s", first, again)
	}
	pause(false)
	if got := pausedAt(); got != "never" {
		t.Errorf("paused_at after resume: %s", got)
	}
}

// A later wave's promotion is no operator action, so no revision holds
// it: its pending change says which rollout and wave wrote it, and that
// the rollout did.
func TestPendingChangesSayWhichRolloutPromotedTheRegion(t *testing.T) {
	_, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE}); err != nil {
		t.Fatal(err)
	}
	r, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Changes[len(r.Changes)-1]
	if want := "rollout to revision 2, wave 2 of 2: image app:1 -> app:2"; last.Summary != want || last.Actor != "rollout" {
		t.Errorf("us's newest pending change: %q (%s), want %q (rollout)", last.Summary, last.Actor, want)
	}
	r, err = op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	if last := r.Changes[len(r.Changes)-1]; last.Summary != "image app:1 -> app:2" {
		t.Errorf("eu's newest pending change: %q, want the update's own", last.Summary)
	}
}
