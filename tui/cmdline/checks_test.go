package cmdline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checks.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A --checks file sets a strategy's checks, defaults filled in by ctrld,
// and an update under it shows the canary's checks in its status.
func TestChecksFromAFile(t *testing.T) {
	e := newCLIEnv(t)
	checks := writeFile(t, `
- name: error-rate
  kind: metric
  query: sum(rate(deploysync_sim_requests_total{namespace={{namespace}},code="500"}[30s]))
  bound: "< 0.01"
  interval: 5s
- name: alerts
  kind: alert
`)
	out, err := e.run("rollout", "strategy", "set", "ws", "prod", "--wave", "eu bake=60s", "--wave", "*", "--checks", checks)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`check error-rate (metric): sum(rate(deploysync_sim_requests_total{namespace={{namespace}},code="500"}[30s])) < 0.01; every 5s, 3 samples, 0 failures allowed`,
		`check alerts (alert): no alert firing matching {namespace={{namespace}}}; every 10s, 3 samples, 0 failures allowed`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("strategy set printed\n%s\nwant a line %q", out, want)
		}
	}
	if out, err := e.run("update", "api", "--image", "app:2"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err = e.run("rollout", "status", "api")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "REGION  CHECK") || !strings.Contains(out, "no evaluation from the region's agent yet") {
		t.Errorf("status of a rollout with checks:\n%s\nwant the canary's checks, without a verdict yet", out)
	}
}

func TestChecksFilesThatCannotBeRead(t *testing.T) {
	e := newCLIEnv(t)
	for _, c := range []struct {
		name, text, words string
	}{
		{"not a list", "name: x", "want a YAML or JSON list of checks"},
		{"unknown field", "- name: x\n  kind: metric\n  treshold: 1", `unknown field "treshold"`},
		{"empty", "[]", "no checks in it"},
		{"bad interval", "- name: x\n  kind: alert\n  interval: soon", `interval "soon"`},
		{"ctrld refuses the query", "- name: x\n  kind: metric\n  query: sum(\n  bound: < 1", "rollout.checks[0].query"},
	} {
		args := []string{"update", "api", "--image", "app:2", "--wave", "eu", "--checks", writeFile(t, c.text)}
		if out, err := e.run(args...); err == nil || !strings.Contains(out+err.Error(), c.words) {
			t.Errorf("%s: %v\n%s\nwant an error naming %q", c.name, err, out, c.words)
		}
	}
	if out, err := e.run("update", "api", "--image", "app:2", "--checks", writeFile(t, "- name: x\n  kind: alert")); err == nil || !strings.Contains(err.Error(), "give them with --wave") {
		t.Errorf("--checks without --wave: %v\n%s", err, out)
	}
	if n := e.env.DB.Ent.Rollout.Query().CountX(t.Context()); n != 0 {
		t.Errorf("refused commands left %d rollouts", n)
	}
}
