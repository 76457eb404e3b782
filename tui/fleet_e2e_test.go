package tui_test

import (
	"context"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Against a real ctrld: a rollout in flight shows on the fleet page; H,
// a reason and enter halt everywhere, and ctrld pauses it, marked with
// the halt, which the page (read again) shows with the reason; B on its
// rollout page, with its name and a reason typed, takes it through; p on
// the halt and y lift it.
func TestConsoleHaltsTheFleetAndBreaksGlass(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	for _, r := range rolloutRegions {
		env.AgentToken(r)
	}
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: rolloutRegions, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryThenRest()}); err != nil {
		t.Fatal(err)
	}
	m, update := rolloutConsole(t, op, "api", false)
	run := func(k tea.KeyPressMsg) {
		t.Helper()
		for _, msg := range results(update(k)) {
			update(msg)
		}
	}
	typeText := func(s string) {
		for _, r := range s {
			update(tea.KeyPressMsg{Code: r, Text: string(r)})
		}
	}
	shows := func(want ...string) {
		t.Helper()
		got := words(m.Content())
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("the console does not show %q:\n%s", w, m.Content())
			}
		}
	}
	run(tea.KeyPressMsg{Code: 'F', Text: "F"})
	shows("HALTS (0)", "IN FLIGHT (1)", "acme/prod: 1 progressing", "acme/prod eu-west progressing api 1/2 -")

	update(tea.KeyPressMsg{Code: 'H', Text: "H"})
	shows("(•) everywhere (pauses 1 progressing now)")
	typeText("incident 4711")
	run(tea.KeyPressMsg{Code: tea.KeyEnter})
	*m = refresh(t, *m)
	shows("halted everywhere: halt #1 paused 1", "#1 everywhere oncall", "incident 4711",
		"acme/prod eu-west paused api 1/2 paused by halt #1 (oncall: incident 4711)")
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "paused" || r.Rollout.HaltId != 1 {
		t.Fatalf("ctrld's rollout after the halt: %v, %v", r, err)
	}

	run(tea.KeyPressMsg{Code: tea.KeyDown})
	run(tea.KeyPressMsg{Code: tea.KeyEnter}) // api's row, under the halt: its rollout page
	shows("rollout of api", "state PAUSED", "halt: #1 holds it")
	update(tea.KeyPressMsg{Code: 'B', Text: "B"})
	typeText("api")
	update(tea.KeyPressMsg{Code: tea.KeyTab})
	typeText("the fix for incident 4711")
	run(tea.KeyPressMsg{Code: tea.KeyEnter})
	shows("broke glass for the rollout of api: now progressing")
	r, err = op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "progressing" || r.Rollout.BreakGlassBy == "" || r.Rollout.BreakGlassReason != "the fix for incident 4711" {
		t.Fatalf("ctrld's rollout after the break-glass: %v, %v", r, err)
	}

	run(tea.KeyPressMsg{Code: 'F', Text: "F"})
	shows("#1 everywhere oncall", "break-glass by oncall")
	update(tea.KeyPressMsg{Code: 'p', Text: "p"}) // the halt is the first row
	shows("Lift halt #1 (everywhere, by oncall: incident 4711)?")
	confirm(update)
	*m = refresh(t, *m)
	shows("lifted halt #1: resumed 0", "HALTS (0)")
}
