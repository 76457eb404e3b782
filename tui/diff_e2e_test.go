package tui_test

import (
	"context"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// Against a real ctrld, in a read-only SSH session's console: the
// command line goes to a deployment's history and to a region; d on an
// old revision shows what rolling back to it changes (image, cpu, env
// names, replicas), and d on the region shows its pending changes (no
// agent took them) each as a diff of ctrld's summary. No env value ever
// shows.
func TestReadOnlyConsoleDiffsARollbackAndPendingChanges(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 1,
		Env: map[string]string{"LOG_LEVEL": "secret-info"}}); err != nil {
		t.Fatal(err)
	}
	image, cpu := "app:2", int32(200)
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, CpuMillicores: &cpu,
		Env: map[string]string{"LOG_LEVEL": "secret-debug", "FEATURE_X": "secret-on"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "eu-west", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m, keys := drive(t, ctrlv1.NewOperatorServiceClient(conn), tui.Options{ReadOnly: true})
	says := func(what string, want ...string) {
		t.Helper()
		got := m.Content()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: no %q in:\n%s", what, w, got)
			}
		}
		if strings.Contains(got, "secret-") {
			t.Errorf("%s shows an env value:\n%s", what, got)
		}
	}

	keys(press(':'))
	keys(typed("history api")...)
	keys(enter, down, down, press('d')) // revision 1
	says("the rollback's diff", "--- revision 3 (now)", "+++ revision 1", "- image app:2\n", "+ image app:1\n", "- cpu 200m\n", "+ cpu 100m\n",
		"  memory 64 MiB\n", "- env FEATURE_X\n", "  env LOG_LEVEL\n", "- replicas eu-west 3\n", "+ replicas eu-west 1\n")
	keys(tea.KeyPressMsg{Code: tea.KeyEscape})
	says("esc from the diff", "history of api")

	keys(press(':'))
	keys(typed("region eu-west")...)
	keys(enter, press('d'))
	says("the pending changes", "PENDING CHANGES (3)", "deployment/api before version", "+ created\n")
	keys(down)
	says("the update's diff", "- image app:1\n", "+ image app:2\n", "- cpu 100m\n", "+ cpu 200m\n", "+ env FEATURE_X\n", "~ env LOG_LEVEL: value changed")
	keys(down)
	says("the scale's diff", "- replicas 1\n", "+ replicas 3\n")
}
