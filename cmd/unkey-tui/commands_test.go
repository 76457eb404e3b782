package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
)

// The script commands drive the real operator API and print the server's
// answer; bad input exits non-zero with the server's words.
func TestScriptCommands(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	token := env.OperatorToken("ci-bot")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		a := app()
		a.Writer = &out
		a.ExitErrHandler = func(*cli.Context, error) {} // return errors, do not exit the test
		err := a.Run(append([]string{"unkey-tui", "--ctrld-address", env.Server.Addr, "--insecure", "--token", token}, args...))
		return out.String(), err
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "--image", "app:1", "--region", "eu", "--workspace", "ws", "--environment", "prod", "--replicas", "2", "--env", "A=1", "api"}, "deployed api"},
		{[]string{"scale", "--region", "eu", "api", "3"}, "done: scaled api to 3"},
		{[]string{"stop", "--region", "eu", "api"}, "done: stop api"},
		{[]string{"pause", "eu"}, "done: pause eu"},
		{[]string{"resync", "eu"}, "done: resync eu"},
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
	if n := env.DB.Ent.AuditLog.Query().CountX(t.Context()); n != 6 {
		t.Fatalf("want every action audited (6), got %d", n)
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
	} {
		a := app()
		a.Writer = &bytes.Buffer{}
		a.ExitErrHandler = func(*cli.Context, error) {}
		err := a.Run(append([]string{"unkey-tui", "--ctrld-address", "127.0.0.1:1", "--insecure", "--token", "t"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Unavailable") {
			t.Errorf("%v: got %v, want a local error naming %s", c.args, err, c.want)
		}
	}
}
