package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's first command works: devstack brings up MariaDB, ctrld, two
// regions with their control planes and agents, and the demo reaches
// Running; then it stops everything. Runs the real command, with its own
// state directory, database and ports so it cannot touch a developer's
// running stack.
func TestDevStackComesUpAndRunsTheDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("devstack: builds and starts the whole stack; skipped in -short mode")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./scripts/devstack", "up", "--no-console", "--dir", t.TempDir(),
		"--ctrld", addr, "--database", "deploysync_devstack_test", "--metrics-port", "0")
	cmd.Dir = root
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("devstack up: %v\n%s", err, out)
	}
	for _, want := range []string{"using the locally built kube-apiserver", "first Running pod", "stack is up; stopping it"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("devstack output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%s", out)
}
