package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/exp/golden"
	gossh "golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/daemon/operatorkeys"
	"github.com/deploysync/deploysync/internal/ci"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// needTools fails the test in CI when a program it runs is missing
// (.ci/run installs them), and skips it elsewhere.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if ci.Running() {
				t.Fatalf("%s not found (Debian packages openssh-client and tmux; .ci/run installs them)", tool)
			}
			t.Skipf("%s not found (Debian packages openssh-client and tmux); skipping outside CI", tool)
		}
	}
}

// aliceInTmux registers alice's key (an operator's, granted logs), as
// ssh-keygen writes it, and opens OpenSSH's client with it on the
// console, in a cols×rows tmux terminal of its own.
func aliceInTmux(t *testing.T, e *sshEnv, cols, rows int) *tmuxTerminal {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.keys.Add(context.Background(), "alice", operatorkeys.Operator, true, signer.PublicKey()); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(e.console.Addr(), ":")
	m := &tmuxTerminal{t: t, socket: filepath.Join(dir, "tmux")}
	ssh := fmt.Sprintf("ssh -F /dev/null -p %s -i %s -o IdentitiesOnly=yes -o IdentityAgent=none -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR 127.0.0.1; echo ssh exited $?; sleep 30", port, keyFile)
	m.tmux("new-session", "-d", "-s", "walk", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), ssh)
	t.Cleanup(func() { exec.Command("tmux", "-S", m.socket, "kill-server").Run() })
	return m
}

// tmuxTerminal is a terminal in a tmux server of its own.
type tmuxTerminal struct {
	t      *testing.T
	socket string
}

func (m *tmuxTerminal) tmux(args ...string) string {
	m.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", m.socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the terminal shows now, trailing blanks dropped.
func (m *tmuxTerminal) screen() string {
	m.t.Helper()
	lines := strings.Split(m.tmux("capture-pane", "-p", "-t", "walk"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
}

// waitFor waits until the screen shows want and returns it.
func (m *tmuxTerminal) waitFor(want string) string {
	m.t.Helper()
	var s string
	shown := false
	defer func() {
		if !shown {
			m.t.Logf("it shows:\n%s", s)
		}
	}()
	eventually.True(m.t, 15*time.Second, fmt.Sprintf("the terminal never showed %q", want), func() bool {
		s = m.screen()
		return strings.Contains(s, want)
	})
	shown = true
	return s
}

// keys types keys as tmux names them (Tab, Enter, Down, y).
func (m *tmuxTerminal) keys(keys ...string) {
	m.t.Helper()
	m.tmux(append([]string{"send-keys", "-t", "walk"}, keys...)...)
}

// Ages, lags in seconds and clock times change from run to run.
var (
	clockTime = regexp.MustCompile(`\b\d\d:\d\d(:\d\d)?\b`)
	age       = regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h)\b`)
	seconds   = regexp.MustCompile(`\b\d+\.\d+\b`)
)

// masked is screen with what changes from run to run as 9s, keeping
// the layout.
func masked(screen string) string {
	nines := func(s string) string { return strings.Repeat("9", len(s)) }
	screen = clockTime.ReplaceAllStringFunc(screen, nines)
	screen = seconds.ReplaceAllStringFunc(screen, func(s string) string {
		whole, frac, _ := strings.Cut(s, ".")
		return nines(whole) + "." + nines(frac)
	})
	return age.ReplaceAllStringFunc(screen, func(s string) string {
		unit := strings.TrimLeft(s, "0123456789.")
		return strings.Repeat("9", len(s)-len(unit)) + unit
	})
}

// The README's walkthrough, over SSH, with Debian's OpenSSH client in an
// 80×24 tmux: the console opens for the registered key, tab reaches the
// deployments, `s` on demo in eu-west asks and `y` stops it, and `q`
// closes the session. Each screen is compared with the golden (clock
// times and ages masked).
func TestSSHWalkthroughWithOpenSSHInTmux(t *testing.T) {
	needTools(t, "ssh", "tmux")
	e := startSSH(t, sshserve.Config{Refresh: 200 * time.Millisecond})
	for _, r := range []string{"eu-west", "us-east"} {
		e.AgentToken(r)
	}
	ctx := context.Background()
	if _, err := e.Operator("setup").Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "demo", WorkspaceId: "acme", EnvironmentId: "dev",
		Image: "nginx:1.27", CpuMillicores: 100, MemoryMib: 64, Port: 80, Regions: []string{"eu-west", "us-east"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}

	m := aliceInTmux(t, e, 80, 24)

	var screens []string
	// shot adds the screen once it shows want and has settled: the
	// same, masked, over half a second (the console refreshes every
	// 200 ms; a page's first frame may precede its read).
	shot := func(name, want string) {
		t.Helper()
		last := masked(m.waitFor(want))
		for settled := time.Now(); time.Since(settled) < 500*time.Millisecond; {
			time.Sleep(100 * time.Millisecond)
			if now := masked(m.waitFor(want)); now != last {
				last, settled = now, time.Now()
			}
		}
		screens = append(screens, "== "+name+" ==\n"+last)
	}
	shot("regions", "waiting for 1 change")
	m.keys("Tab")
	shot("deployments", "demo       us-east")
	m.keys("s")
	shot("stop demo in eu-west: the confirmation", "[y] yes")
	m.keys("y")
	shot("stopped", "stopped")
	m.keys("q")
	shot("the session closed", "ssh exited")
	golden.RequireEqual(t, []byte(strings.Join(screens, "\n")))
}
