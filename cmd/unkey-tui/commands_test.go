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
	if _, err := run("scale", "--region", "eu", "api", "5000"); err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("bad replicas: got %v, want InvalidArgument naming replicas", err)
	}
	if _, err := run("resync", "mars"); err == nil || !strings.Contains(err.Error(), "mars") {
		t.Fatalf("unknown region: got %v", err)
	}
	if n := env.DB.Ent.AuditLog.Query().CountX(t.Context()); n != 7 {
		t.Fatalf("want every command audited (7), got %d", n)
	}
}
