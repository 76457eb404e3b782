package cmdline

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/dial"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The script commands drive the real operator API and print the server's
// answer; bad input exits non-zero with the server's words.
func TestScriptCommands(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	token := env.OperatorToken("ci-bot")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		a := App()
		a.Writer = &out
		a.ExitErrHandler = func(*cli.Context, error) {} // return errors, do not exit the test
		err := Run(a, append([]string{"unkey-tui", "--ctrld-address", env.Server.Addr, "--insecure", "--token", token}, args...))
		return out.String(), err
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "--image", "app:1", "--region", "eu", "--workspace", "ws", "--environment", "prod", "--replicas", "2", "--env", "A=1", "api"}, "deployed api in eu\n"},
		{[]string{"scale", "--region", "eu", "api", "3"}, "scaled api to 3 in eu\n"},
		{[]string{"stop", "--region", "eu", "api"}, "stopped api in eu\n"},
		{[]string{"start", "--region", "eu", "api"}, "started api in eu\n"},
		{[]string{"pause", "eu"}, "paused eu\n"},
		{[]string{"resume", "eu"}, "resumed eu\n"},
		{[]string{"resync", "eu"}, "requested a full resync of eu\n"},
		{[]string{"regions"}, "eu "},
	}
	for _, s := range steps {
		out, err := run(s.args...)
		if err != nil || !strings.Contains(out, s.want) {
			t.Fatalf("%v: output %q, error %v; want %q", s.args, out, err, s.want)
		}
	}
	if _, err := run("resync", "mars"); err == nil || !strings.Contains(err.Error(), "mars") {
		t.Fatalf("unknown region: got %v", err)
	}
	if n := env.DB.Ent.AuditLog.Query().CountX(t.Context()); n != 8 {
		t.Fatalf("want every action audited (8), got %d", n)
	}
}

// Numbers the API carries as int32 are checked here, before any call: a
// loose parse or a silent int32 wrap would send a value nobody typed. The
// address is unreachable, so only a local rejection names the argument.
func TestScriptCommandsRejectBadNumbers(t *testing.T) {
	deploy := func(flag, value string) []string {
		return []string{"deploy", "--image", "app:1", "--region", "eu", "--workspace", "ws", "--environment", "prod", flag, value, "api"}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"scale", "api", "5x"}, `REPLICAS "5x"`},
		{[]string{"scale", "api", "3.9"}, `REPLICAS "3.9"`},
		{[]string{"scale", "api", "-1"}, `REPLICAS "-1"`},
		{[]string{"scale", "api", "1001"}, `REPLICAS "1001"`},
		{[]string{"scale", "api", "4294967299"}, `REPLICAS "4294967299"`}, // 3 as int32
		{deploy("--replicas", "4294967297"), "--replicas"},                // 1 as int32
		{deploy("--replicas", "-1"), "--replicas"},
		{deploy("--cpu", "4294967296"), "--cpu"}, // 0 as int32
		{deploy("--cpu", "0"), "--cpu"},
		{deploy("--memory", "-256"), "--memory"},
		{deploy("--port", "4294975488"), "--port"}, // 8192 as int32
		{deploy("--port", "65536"), "--port"},
		{[]string{"scale", "--region", "eu", "--", "api", "-1"}, `REPLICAS "-1"`},
	} {
		a := App()
		a.Writer = &bytes.Buffer{}
		a.ExitErrHandler = func(*cli.Context, error) {}
		err := Run(a, append([]string{"unkey-tui", "--ctrld-address", "127.0.0.1:1", "--insecure", "--token", "t"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Unavailable") {
			t.Errorf("%v: got %v, want a local error naming %s", c.args, err, c.want)
		}
	}
}

// cliEnv is a real ctrld with deployment api running in regions eu and us,
// and a runner for the script commands against it (global flags first).
type cliEnv struct {
	env   *servertest.Env
	token string
	op    ctrlv1.OperatorServiceClient // to read what the commands did
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	e := &cliEnv{env: servertest.Start(t, server.Config{})}
	e.env.AgentToken("eu")
	e.env.AgentToken("us")
	e.token = e.env.OperatorToken("ci-bot")
	e.op = e.env.Operator("reader")
	if out, err := e.run("deploy", "--image", "app:1", "--region", "eu", "--region", "us", "--workspace", "ws", "--environment", "prod", "api"); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return e
}

// run runs the command line (after the program name) as main would.
func (e *cliEnv) run(args ...string) (string, error) {
	return e.runLine(append([]string{"--ctrld-address", e.env.Server.Addr, "--insecure", "--token", e.token}, args...)...)
}

// runLine runs args exactly as given after the program name; stdout and
// stderr together.
func (e *cliEnv) runLine(args ...string) (string, error) {
	var out bytes.Buffer
	a := App()
	a.Writer, a.ErrWriter = &out, &out
	a.ExitErrHandler = func(*cli.Context, error) {}
	err := Run(a, append([]string{"unkey-tui"}, args...))
	return out.String(), err
}

// desired is api's desired status per region, as ctrld holds it.
func (e *cliEnv) desired(t *testing.T) map[string]string {
	t.Helper()
	r, err := e.op.ListDeployments(t.Context(), &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range r.Deployments {
		for _, in := range d.Regions {
			got[in.Region] = in.DesiredStatus
		}
	}
	return got
}

// stop, start and scale act in every region of a deployment only when
// asked to with --all-regions: without --region they change nothing.
func TestCommandsActInEveryRegionOnlyWithAllRegions(t *testing.T) {
	e := newCLIEnv(t)
	running := map[string]string{"eu": "running", "us": "running"}
	for _, args := range [][]string{
		{"stop", "api"},
		{"start", "api"},
		{"scale", "api", "0"},
		{"stop", "--region", "", "api"},
	} {
		out, err := e.run(args...)
		if err == nil || !strings.Contains(err.Error(), "--region is required (or --all-regions") {
			t.Fatalf("%v: output %q, error %v; want a refusal naming --region and --all-regions", args, out, err)
		}
		if got := e.desired(t); !maps.Equal(got, running) {
			t.Fatalf("%v changed desired state: %v", args, got)
		}
	}
	if _, err := e.run("stop", "--region", "eu", "--all-regions", "api"); err == nil || !strings.Contains(err.Error(), "give one of them") {
		t.Fatalf("--region with --all-regions: got %v", err)
	}
	if out, err := e.run("stop", "--all-regions", "api"); err != nil || out != "stopped api in every region (eu, us)\n" {
		t.Fatalf("stop --all-regions: output %q, error %v", out, err)
	}
	if got := e.desired(t); !maps.Equal(got, map[string]string{"eu": "stopped", "us": "stopped"}) {
		t.Fatalf("stop --all-regions left %v", got)
	}
}

// Flags work wherever they stand: after the positional arguments, global
// flags after the command, and "--" keeps what follows it an argument.
func TestFlagsAnywhereOnTheCommandLine(t *testing.T) {
	e := newCLIEnv(t)
	global := []string{"--ctrld-address", e.env.Server.Addr, "--insecure", "--token", e.token}
	with := func(parts ...[]string) []string { return slices.Concat(parts...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(global, []string{"stop", "api", "--region", "eu"}), "stopped api in eu"},
		{with(global, []string{"scale", "api", "--region=us", "4"}), "scaled api to 4 in us"},
		{with([]string{"start", "api", "--region", "eu"}, global), "started api in eu"},
		{with([]string{"stop"}, global, []string{"--region", "us", "--", "api"}), "stopped api in us"},
	} {
		out, err := e.runLine(c.args...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Fatalf("%v: output %q, error %v; want %q", c.args, out, err, c.want)
		}
	}
	if got := e.desired(t); !maps.Equal(got, map[string]string{"eu": "running", "us": "stopped"}) {
		t.Fatalf("desired state %v, want eu running (stopped, then started) and us stopped", got)
	}
	r, err := e.op.GetRegion(t.Context(), &ctrlv1.GetRegionRequest{Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Deployments[0].Replicas; n != 4 {
		t.Fatalf("us replicas %d, want 4", n)
	}
	// A mistyped flag after the arguments is named, not taken for an
	// argument.
	if _, err := e.run("stop", "api", "--regoin", "eu"); err == nil || !strings.Contains(err.Error(), "regoin") {
		t.Fatalf("mistyped flag: got %v", err)
	}
	// deploy's required flags count after the ID too.
	if out, err := e.run("deploy", "web", "--image", "app:2", "--region", "eu", "--workspace", "ws", "--environment", "prod"); err != nil || !strings.Contains(out, "deployed web in eu") {
		t.Fatalf("deploy with flags after the ID: output %q, error %v", out, err)
	}
}

// An unknown command fails with the usage instead of opening the console.
func TestUnknownCommandFailsWithUsage(t *testing.T) {
	var out bytes.Buffer
	a := App()
	a.Writer, a.ErrWriter = &out, &out
	a.ExitErrHandler = func(*cli.Context, error) {}
	err := Run(a, []string{"unkey-tui", "--ctrld-address", "127.0.0.1:1", "--insecure", "--token", "t", "stpo", "api"})
	if err == nil || !strings.Contains(err.Error(), `unknown command "stpo"`) || !strings.Contains(out.String(), "COMMANDS:") {
		t.Fatalf("error %v, output %q; want an unknown-command error and the usage", err, out.String())
	}
}

// An agent's last error with escape sequences is printed as plain text:
// it must not retitle, clear or recolour the operator's terminal.
func TestRegionsPrintsNoControlSequences(t *testing.T) {
	e := newCLIEnv(t)
	hostile := "\x1b]0;pwned\x07\x1b[2Jboom \x1b[31mred\x1b[0m\r\nnext\tcol\u009b2J"
	if _, err := e.env.Agent("eu").ReportAgentStatus(t.Context(), &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0",
		LastError: hostile}); err != nil {
		t.Fatal(err)
	}
	out, err := e.run("regions")
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < ' ' && r != '\n' || r >= 0x7f && r <= 0x9f }); i >= 0 {
		t.Fatalf("control character %q in the output:\n%q", out[i:i+1], out)
	}
	if !strings.Contains(out, "boom red  next col2J") {
		t.Fatalf("the last error is not shown:\n%s", out)
	}
	// JSON carries the raw text: its escaping makes it harmless, and a
	// script gets what the agent said.
	var doc struct {
		Regions []struct {
			Region    string `json:"region"`
			LastError string `json:"last_error"`
		} `json:"regions"`
	}
	if err := e.runJSON(t, &doc, "regions"); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Regions {
		if r.Region == "eu" && r.LastError != hostile {
			t.Fatalf("JSON last_error %q, want the raw %q", r.LastError, hostile)
		}
	}
}

// An env value with commas is one variable (a DSN, say), not several; and a
// command that takes no arguments refuses them instead of ignoring them.
func TestValuesAreTakenAsTyped(t *testing.T) {
	e := newCLIEnv(t)
	if out, err := e.run("deploy", "db", "--image", "app:1", "--region", "eu", "--workspace", "ws", "--environment", "prod",
		"--env", "DSN=host=db,user=app", "--env", "B=2"); err != nil {
		t.Fatalf("deploy: output %q, error %v", out, err)
	}
	d := e.env.DB.Ent.Deployment.GetX(t.Context(), "db")
	if !maps.Equal(d.Env, map[string]string{"DSN": "host=db,user=app", "B": "2"}) {
		t.Fatalf("env %v, want DSN with its commas and B", d.Env)
	}
	if _, err := e.run("regions", "eu"); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Fatalf("regions with an argument: got %v", err)
	}
}

// unkey-tui refuses a token file other users may read before it dials
// ctrld, and says how to fix it.
func TestRefusesATokenFileOthersMayRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "alice.token")
	if err := os.WriteFile(file, []byte("dso_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	a := App()
	a.Writer, a.ErrWriter = io.Discard, io.Discard
	a.ExitErrHandler = func(*cli.Context, error) {}
	err := Run(a, []string{"unkey-tui", "--ctrld-address", "127.0.0.1:1", "--insecure", "--token-file", file, "regions"})
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+file) {
		t.Fatalf("got %v, want the refusal saying `chmod 600 %s`", err, file)
	}
}

// unkey-tui does not take a root-owned token file its group may read, as
// agentd does for a Kubernetes Secret volume: a person's token file is
// theirs alone.
func TestRefusesAGroupReadableRootTokenFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own the file")
	}
	file := filepath.Join(t.TempDir(), "alice.token")
	if err := os.WriteFile(file, []byte("dso_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o440); err != nil { // root's group: one of ours
		t.Fatal(err)
	}
	a := App()
	a.Writer, a.ErrWriter = io.Discard, io.Discard
	a.ExitErrHandler = func(*cli.Context, error) {}
	err := Run(a, []string{"unkey-tui", "--ctrld-address", "127.0.0.1:1", "--insecure", "--token-file", file, "regions"})
	if !errors.Is(err, dial.ErrTokenFileReadable) {
		t.Fatalf("got %v, want %v", err, dial.ErrTokenFileReadable)
	}
}
