package tui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// rolloutRegions are the regions of the rollout tests, deployed at once.
var rolloutRegions = []string{"eu-west", "us-east", "ap-south"}

// canaryThenRest is eu-west alone, baking a minute, then every other
// region.
func canaryThenRest() *ctrlv1.RolloutStrategy {
	return &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"eu-west"}, Bake: durationpb.New(time.Minute)},
		{Regions: []string{"*"}, Bake: durationpb.New(20 * time.Second)},
	}}
}

// rolloutConsole opens deployment id's rollout page in a console on op
// (the deployments page, R on its first row: id is the only deployment),
// 160 columns wide, and returns it
// with the function that feeds it a message, as the program loop would.
func rolloutConsole(t *testing.T, op ctrlv1.OperatorServiceClient, id string, readOnly bool) (m *tui.Model, update func(tea.Msg) tea.Cmd) {
	t.Helper()
	console := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true, ReadOnly: readOnly}))
	update = func(msg tea.Msg) tea.Cmd {
		next, cmd := console.Update(msg)
		console = next.(tui.Model)
		return cmd
	}
	update(tea.WindowSizeMsg{Width: 160, Height: 40})
	update(update(tea.KeyPressMsg{Code: tea.KeyTab})()) // deployments
	update(update(tea.KeyPressMsg{Code: 'R', Text: "R"})())
	if got := ansi.Strip(console.Content()); !strings.Contains(got, "rollout of "+id) {
		t.Fatalf("R did not open %s's rollout:\n%s", id, got)
	}
	return &console, update
}

// Against a real ctrld: an update with a strategy of its own shows on
// the rollout page as it stands (wave 1 of 2, the canary progressing with
// its deadline, the rest waiting, what comes next); P asks, saying the
// canary is not proven yet, and on yes ctrld promotes: the page shows
// wave 2 and the canary passed, promoted by the operator.
func TestConsolePromotesARollout(t *testing.T) {
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
	got := words(m.Content())
	for _, want := range []string{
		"revision 1 -> 2, image app:1 -> app:2, by oncall",
		"state PROGRESSING, wave 1 of 2, on failure rollback",
		"next: wave 2 (ap-south, us-east) once eu-west is healthy for 1m (deadline in",
		"1 eu-west 1m 0 10m in progress",
		"2 ap-south, us-east 20s 0 10m waiting",
		"1 eu-west progressing deadline ",
		"2 ap-south waiting -",
		"esc back • P promote • p pause • a abort •",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the rollout page does not say %q:\n%s", want, m.Content())
		}
	}

	update(tea.KeyPressMsg{Code: 'P', Text: "P"})
	got = words(m.Content())
	for _, want := range []string{"Promote the rollout of api now?", "Wave 1 (eu-west) passes now, skipping what is left of its bake.",
		"Not proven healthy yet: eu-west (progressing).", "Wave 2 (ap-south, us-east) gets revision 2 (image app:2)."} {
		if !strings.Contains(got, want) {
			t.Errorf("the confirmation does not say %q:\n%s", want, m.Content())
		}
	}
	if r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"}); err != nil || r.Rollout.Wave != 1 {
		t.Fatalf("before the yes: %v, %v", r, err)
	}
	confirm(update)
	*m = refresh(t, *m) // the read the outcome asks for
	got = words(m.Content())
	for _, want := range []string{"promoted the rollout of api: now progressing, wave 2 of 2",
		"state PROGRESSING, wave 2 of 2", "1 eu-west 1m 0 10m passed", "2 ap-south, us-east 20s 0 10m in progress",
		"1 eu-west passed - promoted by oncall", "2 ap-south progressing deadline ", "2 us-east progressing deadline ",
		"next: every region on revision 2 once ap-south, us-east are healthy for 20s"} {
		if !strings.Contains(got, want) {
			t.Errorf("after the promotion the page does not say %q:\n%s", want, m.Content())
		}
	}
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.Wave != 2 || r.Rollout.State != "progressing" {
		t.Fatalf("ctrld's rollout after the yes: %v, %v", r, err)
	}
}

// Against a real ctrld: P asks at wave 1, and while the dialog is open
// the rollout moves to wave 2 (another operator promoted it; the driver
// does the same when the canary's bake ends). The yes sends what was
// confirmed, wave 1, so ctrld refuses it, FailedPrecondition saying what
// changed: the status line shows that, the page is read again and shows
// wave 2, and wave 2 is not passed. Before the fence, this yes ended the
// rollout succeeded: wave 2's regions never proven.
func TestConsolePromoteConfirmedAtWave1DoesNotPassWave2(t *testing.T) {
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
	update(tea.KeyPressMsg{Code: 'P', Text: "P"})
	if got := words(m.Content()); !strings.Contains(got, "Wave 1 (eu-west) passes now") {
		t.Fatalf("P does not ask about wave 1:\n%s", m.Content())
	}
	other := env.Operator("colleague")
	if _, err := other.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE}); err != nil {
		t.Fatal(err)
	}
	moved, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || moved.Rollout.Wave != 2 {
		t.Fatalf("the colleague's promote: %v, %v", moved, err)
	}

	confirm(update)
	*m = refresh(t, *m) // the read the outcome asks for
	got := words(m.Content())
	for _, want := range []string{"FAILED: promote the rollout of api: FailedPrecondition:", "is progressing at wave 2 of 2 now (was 1)",
		"nothing was done", "state PROGRESSING, wave 2 of 2", "1 eu-west passed - promoted by colleague", "2 ap-south progressing deadline "} {
		if !strings.Contains(got, want) {
			t.Errorf("after the refused yes the page does not say %q:\n%s", want, m.Content())
		}
	}
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "progressing" || r.Rollout.Wave != 2 || r.Rollout.Version != moved.Rollout.Version {
		t.Fatalf("the yes confirmed at wave 1 moved the rollout at wave 2: %v, %v", r, err)
	}

	// Asked again, on what is shown now, the yes acts.
	update(tea.KeyPressMsg{Code: 'P', Text: "P"})
	confirm(update)
	if r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"}); err != nil || r.Rollout.State != "succeeded" {
		t.Fatalf("a promote confirmed on the rollout as shown: %v, %v", r, err)
	}
}

// Against a real ctrld and its rollout driver: the canary's instances of
// the new spec crash-loop, as its agent reports; the driver fails the
// gate and rolls back, and the rollout page shows it: ROLLED BACK, why
// with the evidence, the canary failed with it, the other regions never
// reached, and no key to press.
func TestConsoleShowsARolloutRolledBackWithItsEvidence(t *testing.T) {
	env := servertest.Start(t, server.Config{RolloutInterval: 50 * time.Millisecond})
	for _, r := range rolloutRegions {
		env.AgentToken(r)
	}
	agent := env.Agent("eu-west")
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "web", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: rolloutRegions, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	image := "app:crashloop"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "web", Image: &image, Rollout: canaryThenRest()}); err != nil {
		t.Fatal(err)
	}
	canary := env.DB.Ent.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentID("web"), deploymenttopology.Region("eu-west")).OnlyX(ctx)
	var instances []*ctrlv1.Instance
	for i, restarts := range []int32{1, 2, 2} {
		instances = append(instances, &ctrlv1.Instance{PodName: "web-" + string(rune('0'+i)), Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING,
			Reason: "CrashLoopBackOff", Restarts: restarts, SpecHash: canary.SpecHash})
	}
	if _, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu-west",
		Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "web", Instances: instances}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "web"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Rollout.State == "rolled_back" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver did not roll back: %v", r.Rollout)
		}
		time.Sleep(50 * time.Millisecond)
	}

	m, _ := rolloutConsole(t, op, "web", false)
	got := words(m.Content())
	const evidence = "3 of 3 instances CrashLoopBackOff (restarts 5)"
	for _, want := range []string{
		"revision 1 -> 2, image app:1 -> app:crashloop",
		"state ROLLED BACK, wave 1 of 2, on failure rollback, ended",
		"why: ", evidence,
		"1 eu-west 1m 0 10m failed (1 of 1 regions)",
		"2 ap-south, us-east 20s 0 10m never reached",
		"1 eu-west failed - " + evidence,
		"2 ap-south waiting - never reached: ran revision 1 throughout", "2 us-east waiting - never reached: ran revision 1 throughout",
		"next: nothing: rolled back; its regions run revision 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the rolled-back rollout's page does not say %q:\n%s", want, m.Content())
		}
	}
	for _, key := range []string{"promote", "pause", "resume", "abort"} {
		if strings.Contains(got, key) {
			t.Errorf("a rollout that ended offers %q:\n%s", key, m.Content())
		}
	}
}

// Against a real ctrld, a read-only SSH session (a minted session
// credential, as the SSH server makes) on a rollout in flight: the page
// shows it whole, but neither lists nor takes promote, pause or abort;
// the rollout stays where it was.
func TestReadOnlyConsoleCannotControlARollout(t *testing.T) {
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
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	m, update := rolloutConsole(t, ctrlv1.NewOperatorServiceClient(conn), "api", true)
	got := words(m.Content())
	if !strings.Contains(got, "state PROGRESSING, wave 1 of 2") || !strings.Contains(got, "1 eu-west progressing deadline ") {
		t.Fatalf("the read-only page does not show the rollout:\n%s", m.Content())
	}
	for _, key := range []string{"promote", "pause", "abort"} {
		if strings.Contains(got, key) {
			t.Errorf("the read-only page lists %q:\n%s", key, m.Content())
		}
	}
	for _, k := range "Ppa" {
		if cmd := update(tea.KeyPressMsg{Code: k, Text: string(k)}); cmd != nil {
			t.Errorf("%c on a read-only page runs something", k)
		}
		if got := ansi.Strip(m.Content()); strings.Contains(got, "[y] yes") {
			t.Fatalf("%c on a read-only page asks:\n%s", k, got)
		}
	}
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "progressing" || r.Rollout.Wave != 1 {
		t.Errorf("the rollout after the read-only keys: %v, %v", r, err)
	}
}
