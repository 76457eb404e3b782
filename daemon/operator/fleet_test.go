package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Bad input to the fleet's controls is refused InvalidArgument (or
// NotFound) naming the field as the request does, and writes nothing: no
// halt, window or bound, no rollout changed.
func TestBadFleetControlsAreRefusedNamingTheField(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	before, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recurring := func(schedule, tz string, d time.Duration) *ctrlv1.FreezeWindow {
		return &ctrlv1.FreezeWindow{Name: "w", Schedule: schedule, TimeZone: tz, Duration: durationpb.New(d)}
	}
	for _, c := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"a halt without a reason", func() error { _, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{}); return err }, codes.InvalidArgument, "reason:"},
		{"a halt of a region no one registered", func() error {
			_, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Reason: "x", Scope: &ctrlv1.FleetScope{Region: "ue"}})
			return err
		}, codes.InvalidArgument, "scope.region:"},
		{"a halt of half an environment", func() error {
			_, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Reason: "x", Scope: &ctrlv1.FleetScope{WorkspaceId: "ws"}})
			return err
		}, codes.InvalidArgument, "scope.environment_id:"},
		{"a resume of no halt", func() error { _, err := op.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{}); return err }, codes.InvalidArgument, "halt_id:"},
		{"a resume of a halt that is not there", func() error {
			_, err := op.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{HaltId: 99})
			return err
		}, codes.NotFound, "halt 99"},
		{"no window", func() error { _, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{}); return err }, codes.InvalidArgument, "window:"},
		{"a window that cannot be read", func() error {
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: recurring("weekdays after five", "", time.Hour)})
			return err
		}, codes.InvalidArgument, "window.schedule:"},
		{"an unknown time zone", func() error {
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: recurring("0 17 * * 1-5", "Europe/Atlantis", time.Hour)})
			return err
		}, codes.InvalidArgument, "window.time_zone:"},
		{"a window without a duration", func() error {
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: recurring("0 17 * * 1-5", "UTC", 0)})
			return err
		}, codes.InvalidArgument, "window.duration:"},
		{"a one-off window ending before it starts", func() error {
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: &ctrlv1.FreezeWindow{Name: "w",
				StartsAt: timestamppb.New(now), EndsAt: timestamppb.New(now.Add(-time.Hour))}})
			return err
		}, codes.InvalidArgument, "window.ends_at:"},
		{"a window of a region", func() error {
			w := recurring("0 17 * * 1-5", "UTC", time.Hour)
			w.Scope = &ctrlv1.FleetScope{Region: "eu"}
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: w})
			return err
		}, codes.InvalidArgument, "window.scope.region:"},
		{"a window of an environment half given", func() error {
			w := recurring("0 17 * * 1-5", "UTC", time.Hour)
			w.Scope = &ctrlv1.FleetScope{EnvironmentId: "prod"}
			_, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: w})
			return err
		}, codes.InvalidArgument, "window.scope.environment_id:"},
		{"a bound of 0", func() error {
			_, err := op.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: &ctrlv1.FleetScope{WorkspaceId: "ws", EnvironmentId: "prod"}})
			return err
		}, codes.InvalidArgument, "max:"},
		{"a bound below 0", func() error {
			_, err := op.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Scope: &ctrlv1.FleetScope{Region: "eu"}, Max: -2})
			return err
		}, codes.InvalidArgument, "max:"},
		{"a bound of everywhere", func() error {
			_, err := op.SetPacingBound(ctx, &ctrlv1.SetPacingBoundRequest{Max: 2})
			return err
		}, codes.InvalidArgument, "scope.environment_id:"},
		{"a break-glass without a reason", func() error {
			_, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS})
			return err
		}, codes.InvalidArgument, "reason:"},
		{"a reason with another action", func() error {
			_, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE, Reason: "x"})
			return err
		}, codes.InvalidArgument, "reason:"},
		{"a break-glass reason too long", func() error {
			v3 := "app:3"
			_, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &v3, BreakGlassReason: strings.Repeat("x", 1025)})
			return err
		}, codes.InvalidArgument, "break_glass_reason:"},
	} {
		err := c.call()
		if status.Code(err) != c.code || !strings.HasPrefix(status.Convert(err).Message(), c.field) {
			t.Errorf("%s: got %v, want %s starting %q", c.name, err, c.code, c.field)
		}
	}
	db := env.DB.Ent
	for what, count := range map[string]func() (int, error){
		"halts":   func() (int, error) { return db.FleetHalt.Query().Count(ctx) },
		"windows": func() (int, error) { return db.FreezeWindow.Query().Count(ctx) },
		"bounds":  func() (int, error) { return db.PacingBound.Query().Count(ctx) },
	} {
		if n, err := count(); err != nil || n != 0 {
			t.Errorf("%s written by refused calls: %d, %v", what, n, err)
		}
	}
	after, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || after.Rollout.Version != before.Rollout.Version || after.Rollout.State != "progressing" {
		t.Errorf("the rollout after the refusals: %v, %v; want it untouched at version %d", after, err, before.Rollout.Version)
	}
}
