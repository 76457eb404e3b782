package tui_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// refresh runs the console's initial commands (its fetch) against the real
// server and feeds the results back, as the program loop would.
func refresh(t *testing.T, m tui.Model) tui.Model {
	t.Helper()
	batch, ok := m.Init()().(tea.BatchMsg)
	if !ok {
		t.Fatal("Init does not batch its commands")
	}
	for _, cmd := range batch {
		next, _ := m.Update(cmd()) // the fetch result; the tick changes nothing
		m = next.(tui.Model)
	}
	return m
}

// lagOf reads the LAG column of region's row in the regions view: the
// number ending where the header's "LAG" ends (the columns before it vary
// in how many words they hold).
func lagOf(t *testing.T, content, region string) int {
	t.Helper()
	lines := strings.Split(ansi.Strip(content), "\n")
	end := -1
	for _, line := range lines {
		if i := strings.Index(line, " LAG "); i >= 0 && strings.Contains(line, "REGION") {
			end = i + len(" LAG")
		}
	}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) > 2 && f[1] == region && end > 0 && len(line) >= end {
			n, err := strconv.Atoi(strings.TrimSpace(line[end-5 : end]))
			if err != nil {
				t.Fatalf("LAG column of %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no row for %s in:\n%s", region, content)
	return 0
}

// Against a real ctrld and MariaDB: lag rises while changes are written and
// no agent acks, and falls when the agent catches up.
func TestConsoleShowsLagRisingAndFalling(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	op := env.Operator("oncall")
	agent := env.Agent("eu-west")
	ctx := context.Background()
	m := tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true})
	deploy := func(id string) {
		t.Helper()
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "acme", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}

	m = refresh(t, m)
	if lag := lagOf(t, m.Content(), "eu-west"); lag != 0 {
		t.Fatalf("lag %d before any change", lag)
	}
	deploy("a")
	deploy("b")
	m = refresh(t, m)
	if lag := lagOf(t, m.Content(), "eu-west"); lag != 2 {
		t.Fatalf("lag %d after two unacked changes:\n%s", lag, m.Content())
	}
	deploy("c")
	m = refresh(t, m)
	if lag := lagOf(t, m.Content(), "eu-west"); lag != 3 {
		t.Fatalf("lag did not rise to 3:\n%s", m.Content())
	}

	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu-west", AgentIdentity: "krane-0",
		AckedVersion: regions.Regions[0].HeadVersion}); err != nil {
		t.Fatal(err)
	}
	m = refresh(t, m)
	if lag := lagOf(t, m.Content(), "eu-west"); lag != 0 {
		t.Fatalf("lag did not fall after the agent caught up:\n%s", m.Content())
	}
}

// Against a real ctrld: killed, the console keeps its rows but marks them
// stale with the time of its last good read; started again, it is live
// again within a few seconds. (That the console resets the connection's
// backoff on a failed read is the unit test's to prove: the backoff here
// does not grow past 5 s within the outage.)
func TestConsoleMarksStaleWhileCtrldIsDownAndRecovers(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	conn := env.Dial(env.OperatorToken("oncall"))
	m := tui.New(ctrlv1.NewOperatorServiceClient(conn), tui.Options{Refresh: time.Millisecond, NoColor: true, Reconnect: conn.ResetConnectBackoff})
	m = refresh(t, m)
	if got := m.Content(); strings.Contains(got, "STALE") || !strings.Contains(got, "eu-west") {
		t.Fatalf("live view:\n%s", got)
	}

	env.Server.Stop()
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		m = refresh(t, m) // a console polling while ctrld is down
	}
	got := m.Content()
	if !strings.Contains(got, "STALE as of ") || !strings.Contains(got, "ctrld unreachable") || !strings.Contains(got, "? eu-west") {
		t.Fatalf("rows not marked stale while ctrld is down:\n%s", got)
	}

	env.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for m = refresh(t, m); strings.Contains(m.Content(), "STALE"); m = refresh(t, m) {
		if time.Now().After(deadline) {
			t.Fatalf("still stale 5 s after ctrld came back:\n%s", m.Content())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := m.Content(); strings.Contains(got, "unreachable") || !strings.Contains(got, "eu-west") {
		t.Fatalf("not live again:\n%s", got)
	}
}

// historyConsole opens deployment api's history in a console on op, and
// returns it with the function that feeds it a message, as the program
// loop would.
func historyConsole(t *testing.T, op ctrlv1.OperatorServiceClient) (m *tui.Model, update func(tea.Msg) tea.Cmd) {
	t.Helper()
	console := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true}))
	update = func(msg tea.Msg) tea.Cmd {
		next, cmd := console.Update(msg)
		console = next.(tui.Model)
		return cmd
	}
	update(update(tea.KeyPressMsg{Code: tea.KeyTab})()) // deployments
	update(update(tea.KeyPressMsg{Code: 'h', Text: "h"})())
	return &console, update
}

// words is the console's text as one line of words: a confirmation's
// sentences read whole wherever its box wrapped them.
func words(content string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(ansi.Strip(content), "│", " ")), " ")
}

// confirm says yes to the confirmation shown and feeds the outcome back.
func confirm(update func(tea.Msg) tea.Cmd) {
	for _, msg := range results(update(tea.KeyPressMsg{Code: 'y', Text: "y"})) {
		update(msg)
	}
}

// Against a real ctrld: after deploy app:1, update to app:2 and a stop, r
// on the newest revision lets ctrld pick what to restore, as it does by
// default (the stop is passed over: rollback does not start or stop
// regions), and the confirmation says so; the console once asked for the
// stop's revision, "eu-west stopped -> running", and ctrld refused.
func TestConsoleRollsBackPastAStop(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu-west",
		Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	m, update := historyConsole(t, op)
	if got := m.Content(); !strings.Contains(got, "oncall") || !strings.Contains(got, "app:1") || !strings.Contains(got, "app:2") {
		t.Fatalf("history lacks the update:\n%s", got)
	}
	update(tea.KeyPressMsg{Code: 'r', Text: "r"})
	got := words(m.Content())
	for _, want := range []string{"newest earlier revision with another spec or other replicas (revision 1, as far as the console can see; now 3)",
		"image app:2 -> app:1", "eu-west stays stopped"} {
		if !strings.Contains(got, want) {
			t.Errorf("the confirmation does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "-> running") {
		t.Errorf("the confirmation says a rollback starts a region:\n%s", got)
	}
	confirm(update)
	if got := m.Content(); !strings.Contains(got, "rolled back api to revision 1") {
		t.Fatalf("no result:\n%s", got)
	}
	h, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if newest := h.Revisions[0]; newest.Action != "rollback" || newest.Image != "app:1" || newest.Regions[0].Status != "stopped" {
		t.Fatalf("newest revision %v", newest)
	}
}

// Against a real ctrld: when only env values differ, which the console is
// not shown, it neither says "nothing differs" nor refuses: r on the
// newest revision lets ctrld find the one with other values, and r on an
// older one says its values come back.
func TestConsoleRollsBackEnvValuesItCannotSee(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 1,
		Env: map[string]string{"LOG_LEVEL": "info"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Env: map[string]string{"LOG_LEVEL": "debug"}}); err != nil {
		t.Fatal(err)
	}
	m, update := historyConsole(t, op)
	update(tea.KeyPressMsg{Code: tea.KeyDown})
	update(tea.KeyPressMsg{Code: 'r', Text: "r"}) // revision 1, chosen
	got := words(m.Content())
	if strings.Contains(got, "nothing differs from the current spec") || !strings.Contains(got, "env values may") {
		t.Errorf("the confirmation claims to know the env values are the same:\n%s", m.Content())
	}
	update(tea.KeyPressMsg{Code: 'n', Text: "n"})
	update(tea.KeyPressMsg{Code: tea.KeyUp})
	update(tea.KeyPressMsg{Code: 'r', Text: "r"}) // the newest
	if got := words(m.Content()); !strings.Contains(got, "Roll back deployment api to the newest earlier revision") {
		t.Fatalf("r on the newest asks nothing:\n%s", got)
	}
	confirm(update)
	if got := m.Content(); !strings.Contains(got, "rolled back api to revision 1") {
		t.Fatalf("no result:\n%s", got)
	}
	h, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if newest := h.Revisions[0]; newest.Action != "rollback" || newest.Summary != "env LOG_LEVEL changed" {
		t.Fatalf("newest revision %v", newest)
	}
}

// Against a real ctrld: what an agent reports of why instances are not
// ready shows under the deployment's row on the deployments page, beside
// what its changes wait for; it goes when they recover.
func TestConsoleShowsWhyInstancesAreNotReady(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	op := env.Operator("oncall")
	agent := env.Agent("eu-west")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	report := func(in ...*ctrlv1.Instance) {
		t.Helper()
		if _, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu-west",
			Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "api", Instances: in}}}); err != nil {
			t.Fatal(err)
		}
	}
	crashing := func(pod string, restarts int32) *ctrlv1.Instance {
		return &ctrlv1.Instance{PodName: pod, Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Reason: "CrashLoopBackOff", Restarts: restarts}
	}
	report(crashing("api-0", 1), crashing("api-1", 2), crashing("api-2", 2))
	const why = "3 of 3 instances CrashLoopBackOff (restarts 5)"

	m := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true}))
	for _, msg := range []tea.Msg{tea.WindowSizeMsg{Width: 160, Height: 40}, tea.KeyPressMsg{Code: tea.KeyTab}} { // the deployments page
		next, _ := m.Update(msg)
		m = next.(tui.Model)
	}
	m = refresh(t, m)
	got := ansi.Strip(m.Content())
	if !strings.Contains(got, "↳ waits: agent down; "+why) {
		t.Fatalf("deployments page does not say why api's instances are not ready:\n%s", got)
	}

	report(&ctrlv1.Instance{PodName: "api-0", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true})
	m = refresh(t, m)
	if got := ansi.Strip(m.Content()); strings.Contains(got, "CrashLoopBackOff") {
		t.Fatalf("the reason stayed after the instances recovered:\n%s", got)
	}
}
