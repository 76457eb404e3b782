package operator_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/ent/auditlog"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fenceOf is the fence of r as a person saw it.
func fenceOf(r *ctrlv1.Rollout) *ctrlv1.RolloutFence {
	return &ctrlv1.RolloutFence{RolloutId: r.Id, Revision: r.Revision, Wave: r.Wave, Version: r.Version}
}

func getRollout(t *testing.T, op ctrlv1.OperatorServiceClient, id string) *ctrlv1.Rollout {
	t.Helper()
	got, err := op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: id})
	if err != nil {
		t.Fatal(err)
	}
	return got.Rollout
}

// A promote confirmed at wave 1 does not pass wave 2: the rollout moved
// on (another operator promoted it; the driver does the same) while the
// dialog was open, so ctrld refuses it FailedPrecondition, saying what
// changed, audits the refusal, and the rollout stays at wave 2. The same
// holds when only its version moved (paused and resumed meanwhile). A
// fence that matches acts.
func TestAPromoteConfirmedAtWave1DoesNotPassWave2(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	seen := getRollout(t, op, "api")
	if seen.Id == 0 || seen.Version == 0 || seen.Wave != 1 {
		t.Fatalf("the rollout as shown has no id or version, or is not at wave 1: %v", seen)
	}

	// Meanwhile, it moves to wave 2.
	moved, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE})
	if err != nil {
		t.Fatal(err)
	}
	if moved.Rollout.Wave != 2 || moved.Rollout.Version <= seen.Version || moved.Rollout.Id != seen.Id {
		t.Fatalf("after the first promote: %v", moved.Rollout)
	}

	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, Fence: fenceOf(seen)})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a promote confirmed at wave 1, the rollout at wave 2: got %v, want FailedPrecondition", err)
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{"not the rollout you confirmed", "progressing at wave 2 of 2 now (was 1)", "nothing was done"} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("the refusal %q does not say %q", status.Convert(err).Message(), want)
		}
	}
	if r := getRollout(t, op, "api"); r.State != "progressing" || r.Wave != 2 || r.Version != moved.Rollout.Version {
		t.Errorf("the refused promote moved the rollout: %v", r)
	}
	if l := env.DB.Ent.AuditLog.Query().Where(auditlog.Action("rollout.promote")).Order(auditlog.ByID()).AllX(ctx); len(l) != 2 ||
		!strings.Contains(l[1].Error, "not the rollout you confirmed") || !strings.Contains(l[1].Detail, `"fence"`) {
		t.Errorf("the refused promote's audit record: %v", l)
	}

	// Same wave, another version: paused and resumed by someone else.
	seen = getRollout(t, op, "api")
	for _, a := range []ctrlv1.RolloutAction{ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE, ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME} {
		if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: a}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, Fence: fenceOf(seen)})
	if want := "version " + itoa(seen.Version+2) + " (was " + itoa(seen.Version) + ")"; status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Errorf("a promote confirmed at an older version: got %v, want FailedPrecondition saying %q", err, want)
	}
	if r := getRollout(t, op, "api"); r.State != "progressing" || r.Wave != 2 {
		t.Errorf("the refused promote moved the rollout: %v", r)
	}

	// What is shown now is what is in flight: the promote acts.
	done, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE,
		Fence: fenceOf(getRollout(t, op, "api"))})
	if err != nil || done.Rollout.State != "succeeded" {
		t.Fatalf("a promote confirmed on the rollout as it is: %v, %v", done, err)
	}
}

// An abort confirmed for one rollout does not roll back the next: the one
// confirmed ended, and another of the same deployment started; ctrld
// refuses it FailedPrecondition, naming what became of the confirmed one
// and what is in flight, and the new one keeps running its image. With
// none in flight at all, the fenced abort is refused the same way.
func TestAnAbortConfirmedForAnEarlierRolloutLeavesTheNewOneRunning(t *testing.T) {
	_, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	seen := getRollout(t, op, "api")
	if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT}); err != nil {
		t.Fatal(err)
	}

	_, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT, Fence: fenceOf(seen)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "(revision 2) ended rolled back") || !strings.Contains(err.Error(), "none is in flight") {
		t.Errorf("an abort confirmed for a rollout that ended, none in flight: got %v, want FailedPrecondition saying it ended", err)
	}

	image3 := "app:3"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image3, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	next := getRollout(t, op, "api")
	if next.Id == seen.Id || next.State != "progressing" {
		t.Fatalf("the new rollout: %v", next)
	}
	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT, Fence: fenceOf(seen)})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("an abort confirmed for the earlier rollout: got %v, want FailedPrecondition", err)
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{"(revision 2) ended rolled back", "the one in flight now is revision " + itoa(int64(next.Revision)), "nothing was done"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if r := getRollout(t, op, "api"); r.Id != next.Id || r.State != "progressing" || r.Version != next.Version {
		t.Errorf("the refused abort moved the new rollout: %v", r)
	}
	wantImages(t, op, "after the refused abort", map[string]string{"eu": "app:3", "ap": "app:1", "us": "app:1"})

	// Its revision alone names it too.
	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT,
		Fence: &ctrlv1.RolloutFence{Revision: seen.Revision}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("an abort fenced by the earlier revision alone: got %v, want FailedPrecondition", err)
	}
	wantImages(t, op, "after the refused aborts", map[string]string{"eu": "app:3", "ap": "app:1", "us": "app:1"})

	// A fence no rollout can match is bad input.
	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT,
		Fence: &ctrlv1.RolloutFence{Wave: -1}})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "fence.wave:") {
		t.Errorf("a negative fence.wave: got %v, want InvalidArgument naming it", err)
	}
	if r := getRollout(t, op, "api"); r.Id != next.Id || r.State != "progressing" {
		t.Errorf("the refused aborts moved the new rollout: %v", r)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
