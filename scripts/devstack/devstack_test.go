package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/ci"
	"github.com/deploysync/deploysync/internal/kubetest"
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
	out := runDevstack(t, nil, "up", "--mode", "local", "--no-console", "--dir", t.TempDir(),
		"--ctrld", freeAddr(t), "--ssh", freeAddr(t), "--database", "deploysync_devstack_test", "--metrics-port", "0")
	for _, want := range []string{"the locally built kube-apiserver", "first Running pod", "the demo runs in every region", "stack is up; stopping it"} {
		if !strings.Contains(out, want) {
			t.Fatalf("devstack output lacks %q:\n%s", want, out)
		}
	}
	// Each region's Prometheus, which had the demo's simulated traffic
	// before devstack printed it.
	for _, r := range regions {
		if !regexp.MustCompile(`each region's Prometheus, scraping its traffic simulator \(SIMULATED[^\n]*\n(  .*\n)*  ` + r + `: http://127\.0\.0\.1:\d+\n`).MatchString(out) {
			t.Errorf("devstack does not print %s's Prometheus URL in its summary:\n%s", r, out)
		}
	}
	t.Logf("%s", out)
}

// A component that dies while the console has the screen is logged to
// .dev/devstack.log at once and listed, with the end of its log and the
// command that restarts it, once the console exits. The console runs on
// devstack's own stdout. The console here is a stand-in that kills
// us-east's agent through its pid file and quits once devstack noticed,
// in its log and in the notice the console shows on its status line (the
// directory its --notices names).
//
// Before that, the stand-in opens the console over SSH as the commands
// devstack printed do (ssh/known_hosts checked strictly): the operator
// key's command runs, the read-only key's change is refused.
func TestDevStackReportsAComponentThatDiedUnderTheConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("devstack: builds and starts the whole stack; skipped in -short mode")
	}
	needSSH(t)
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	console := filepath.Join(root, "console")
	sshAddr := freeAddr(t)
	_, port, _ := net.SplitHostPort(sshAddr)
	writeScript(t, console, `echo "stand-in console on devstack's stdout"
while [ $# -gt 0 ]; do [ "$1" = --notices ] && notices=$2; shift; done
ssh="ssh -F /dev/null -p `+port+` -o UserKnownHostsFile=`+dir+`/ssh/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes -o IdentitiesOnly=yes"
$ssh -i `+dir+`/ssh/operator localhost regions --output json >`+root+`/operator.out 2>&1; echo "exit $?" >>`+root+`/operator.out
$ssh -i `+dir+`/ssh/read-only localhost scale demo 4 --region eu-west >`+root+`/read-only.out 2>&1; echo "exit $?" >>`+root+`/read-only.out
pid=$(sed -n 's/^ *"pid": \([0-9]*\),$/\1/p' `+dir+`/pids/agentd-us-east.json)
kill -9 -$pid
for i in $(seq 600); do
  grep -q "agentd-us-east (pid $pid) exited" `+dir+`/devstack.log &&
    grep -q "^agentd-us-east exited (signal: killed) at .* — go run ./scripts/devstack restart agentd-us-east" "$notices/agentd-us-east" && exit 0
  sleep 0.1
done
echo "stand-in console: devstack did not log the death of pid $pid, or did not tell the console in $notices"; exit 1`)
	out := runDevstack(t, nil, "up", "--mode", "local", "--dir", dir, "--console", console,
		"--ctrld", freeAddr(t), "--ssh", sshAddr, "--database", "deploysync_devstack_test", "--metrics-port", "0")
	if got := readFile(t, filepath.Join(root, "operator.out")); !strings.Contains(got, `"region": "eu-west"`) || !strings.HasSuffix(got, "exit 0\n") {
		t.Errorf("the operator key's ssh command:\n%s\ndevstack:\n%s", got, out)
	}
	if got := readFile(t, filepath.Join(root, "read-only.out")); !strings.Contains(got, "PermissionDenied") && !strings.Contains(got, "read-only") || !strings.HasSuffix(got, "exit 1\n") {
		t.Errorf("the read-only key's change over ssh, want it refused:\n%s", got)
	}
	for _, want := range []string{"ssh -p " + port + " -i " + dir + "/ssh/operator -o UserKnownHostsFile=" + dir + "/ssh/known_hosts localhost", dir + "/ssh/read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("devstack does not print %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"stand-in console on devstack's stdout",
		"while the stack ran, agentd-us-east (pid ",
		") exited (signal: killed)",
		"restart it: go run ./scripts/devstack restart agentd-us-east --dir " + dir,
		"stopping the stack",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("devstack output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "stand-in console: devstack did not") {
		t.Errorf("the console was not told:\n%s", out)
	}
	if strings.Contains(out, "agentd-eu-west (pid") {
		t.Errorf("devstack reports eu-west's agent, which ran until the stack stopped:\n%s", out)
	}
}

// After `kill -9` of devstack under a console, `down` leaves nothing: the
// console quit on its own (SIGTERM when devstack died, so it restores the
// terminal), the daemons and control planes died with devstack, and down
// stops what outlives it (an agent restarted by hand), deletes the control
// planes' data, drops the database and says so. Before the crash: every
// component has a labelled pid file, each region a kubeconfig at
// .dev/kube/REGION.kubeconfig, the operator token is named for the OS
// user, and `restart` brings a killed agent back.
func TestDownCleansUpAfterAKilledDevStack(t *testing.T) {
	if testing.Short() {
		t.Skip("devstack: builds and starts the whole stack; skipped in -short mode")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	console := filepath.Join(root, "console")
	writeScript(t, console, `trap 'touch `+root+`/console-terminated; exit 0' TERM
touch `+root+`/console-started
while :; do sleep 0.1; done`)
	const db = "deploysync_devstack_crash_test"
	up := devstackCommand(t, "up", "--mode", "local", "--dir", dir, "--console", console,
		"--ctrld", freeAddr(t), "--ssh", freeAddr(t), "--database", db, "--metrics-port", "0")
	upOut, err := os.Create(filepath.Join(root, "up.out"))
	if err != nil {
		t.Fatal(err)
	}
	up.Stdout, up.Stderr = upOut, upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	upDone := make(chan struct{})
	go func() { up.Wait(); close(upDone) }()
	t.Cleanup(func() { up.Process.Kill(); <-upDone; runDevstack(t, nil, "down", "--dir", dir) })
	waitUntil(t, upDone, root, 10*time.Minute, "the console started", func() bool { return exists(filepath.Join(root, "console-started")) })

	pids := map[string]map[string]any{}
	for _, name := range []string{"devstack", "ctrld", "agentd-eu-west", "agentd-us-east", "unkey-tui"} {
		var c map[string]any
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "pids", name+".json"))), &c); err != nil {
			t.Fatalf("pid file of %s: %v", name, err)
		}
		if c["name"] != name || c["pid"].(float64) <= 0 || len(c["command"].([]any)) == 0 {
			t.Errorf("pid file of %s lacks its name, pid or command: %v", name, c)
		}
		if log, _ := c["log"].(string); name != "unkey-tui" && !exists(log) {
			t.Errorf("pid file of %s names no log that exists: %v", name, c)
		}
		pids[name] = c
	}
	for _, r := range regions {
		if !exists(filepath.Join(dir, "kube", r+".kubeconfig")) {
			t.Errorf("no kubeconfig for %s at %s/kube/%s.kubeconfig", r, dir, r)
		}
	}
	got, logs := operatorToken(t, db)
	if want := operatorName(user.Current, os.Getenv); got != want || got == "" || !logs {
		t.Errorf("the operator token is named %q, may read logs %v; want %q, true (the console on it opens logs)", got, logs, want)
	}

	agent := int(pids["agentd-us-east"]["pid"].(float64))
	syscall.Kill(-agent, syscall.SIGKILL)
	waitUntil(t, upDone, root, time.Minute, "devstack logged the agent's death", func() bool {
		log, _ := os.ReadFile(filepath.Join(dir, "devstack.log"))
		return strings.Contains(string(log), fmt.Sprintf("agentd-us-east (pid %d) exited", agent))
	})
	restarted := runDevstack(t, nil, "restart", "agentd-us-east", "--dir", dir)
	if !strings.Contains(restarted, fmt.Sprintf("was %d", agent)) {
		t.Errorf("restart did not say it replaced pid %d:\n%s", agent, restarted)
	}
	var again component
	json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "pids", "agentd-us-east.json"))), &again)
	if again.PID == agent || !again.running() {
		t.Fatalf("restart left no new agent running: %+v", again)
	}

	syscall.Kill(int(pids["devstack"]["pid"].(float64)), syscall.SIGKILL)
	<-upDone
	waitUntil(t, nil, root, time.Minute, "the console got SIGTERM", func() bool { return exists(filepath.Join(root, "console-terminated")) })
	if !again.running() {
		t.Fatalf("control: the restarted agent (no child of devstack) should outlive it")
	}

	out := runDevstack(t, nil, "down", "--dir", dir)
	t.Logf("%s", out)
	for _, want := range []string{
		fmt.Sprintf("stopped agentd-us-east (pid %d)", again.PID),
		"removed control-plane data " + filepath.Join(dir, "tmp", "deploysync-testproc", "kube-"),
		"dropped database " + db,
		"removed " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("down's output lacks %q:\n%s", want, out)
		}
	}
	if again.running() {
		t.Errorf("the restarted agent still runs after down")
	}
	if exists(dir) {
		t.Errorf("down left %s behind", dir)
	}
}

// waitUntil polls cond until it holds, failing with the output of up (in
// root/up.out) when up exits first or within runs out.
func waitUntil(t *testing.T, upDone chan struct{}, root string, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		select {
		case <-upDone:
			t.Fatalf("devstack exited before %s:\n%s", what, readFile(t, filepath.Join(root, "up.out")))
		default:
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(root, "up.out"))
			t.Fatalf("%s: not within %s; devstack said:\n%s", what, within, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// operatorToken is the name of db's operator token and whether it has
// the logs grant.
func operatorToken(t *testing.T, db string) (name string, logs bool) {
	t.Helper()
	admin, err := adminDB()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.QueryRow("SELECT name, logs FROM "+quoteIdent(db)+".api_tokens WHERE kind = 'operator'").Scan(&name, &logs); err != nil {
		t.Fatal(err)
	}
	return name, logs
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Where a Docker engine answers, devstack creates one kind cluster per
// region from scripts/kind/cluster.yaml, runs the agents against them and
// deletes them when it stops (or, after a crash, on `down`). There is no
// Docker engine here, so `docker` and `kind` are stand-ins on PATH: docker
// answers `info`, and kind "creates" a cluster by handing out the
// kubeconfig of a real local control plane the test started. Everything
// else (ctrld, agents, the demo reaching Running) is the real stack.
func TestDevStackKindModeRunsTheDemoOnTheKindClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("devstack: builds and starts the whole stack; skipped in -short mode")
	}
	fake := t.TempDir()
	clusters := map[string]*kubetest.Cluster{}
	for _, r := range regions {
		c := kubetest.StartForTest(t, kubetest.Options{Workloads: true})
		clusters[r] = c
		copyFile(t, c.Kubeconfig, filepath.Join(fake, "deploysync-"+r+".kubeconfig"))
	}
	writeScript(t, filepath.Join(fake, "docker"), `[ "$1" = info ] && exit 0; echo "fake docker: $*" >&2; exit 1`)
	writeScript(t, filepath.Join(fake, "kind"), `
echo "$*" >> "$FAKE_KIND_DIR/calls"
[ "$1 $2" = "create cluster" ] || [ "$1 $2" = "delete cluster" ] || { echo "fake kind: $*" >&2; exit 1; }
action=$1; shift 2
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift ;;
    --kubeconfig) kubeconfig=$2; shift ;;
    --config) config=$2; shift ;;
  esac
  shift
done
if [ "$action" = create ]; then
  [ -f "$config" ] || { echo "fake kind: no config $config" >&2; exit 1; }
  cp "$FAKE_KIND_DIR/$name.kubeconfig" "$kubeconfig"
fi`)
	env := []string{"PATH=" + fake + string(os.PathListSeparator) + os.Getenv("PATH"), "FAKE_KIND_DIR=" + fake}

	dir := t.TempDir()
	out := runDevstack(t, env, "up", "--no-console", "--dir", dir, "--ctrld", freeAddr(t), "--ssh", freeAddr(t),
		"--database", "deploysync_devstack_kind_test", "--metrics-port", "0")
	for _, want := range []string{"a Docker engine answers: one kind cluster per region", "the demo runs in every region", "stack is up; stopping it"} {
		if !strings.Contains(out, want) {
			t.Fatalf("devstack output lacks %q:\n%s", want, out)
		}
	}
	calls := readFile(t, filepath.Join(fake, "calls"))
	for _, r := range regions {
		for _, want := range []string{"create cluster --name deploysync-" + r + " --config ", "delete cluster --name deploysync-" + r} {
			if !strings.Contains(calls, want) {
				t.Errorf("kind was not called with %q; calls:\n%s", want, calls)
			}
		}
		// The agent of each region applied the demo to that region's cluster.
		if err := demoPodRunning(context.Background(), clusters[r].Config); err != nil {
			t.Errorf("%s: on its kind cluster: %v", r, err)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(fake, "calls")), "--config "+mustAbs(t, "../../"+kindConfig)) {
		t.Errorf("kind clusters were not created from %s; calls:\n%s", kindConfig, calls)
	}

	// A crashed up leaves its record; down deletes what it names.
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "kind-clusters"), []byte(filepath.Join(fake, "kind")+"\tdeploysync-left-behind\n"), 0o600)
	runDevstack(t, env, "down", "--dir", dir)
	if !strings.Contains(readFile(t, filepath.Join(fake, "calls")), "delete cluster --name deploysync-left-behind") {
		t.Errorf("down did not delete the recorded kind cluster")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s behind", dir)
	}
}

// An address the stack needs that is already taken (an earlier stack,
// Prometheus on 9090) is refused up front, naming the flag that moves it,
// instead of the stack failing later with "connection refused".
func TestDevStackRefusesATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	cmd := devstackCommand(t, "up", "--dir", dir, "--ctrld", freeAddr(t), "--ssh", freeAddr(t),
		"--metrics-port", strings.TrimPrefix(l.Addr().String(), "127.0.0.1:"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), l.Addr().String()+" is taken") || !strings.Contains(string(out), "--metrics-port") {
		t.Fatalf("want a refusal naming %s and --metrics-port, got %v:\n%s", l.Addr(), err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); !os.IsNotExist(err) {
		t.Errorf("devstack started something before refusing: %s/logs exists", dir)
	}
}

// The stack runs without TLS, so a --ctrld address off loopback is refused
// up front (ctrld would refuse to listen there, the clients to dial it).
func TestDevStackRefusesANonLoopbackCtrld(t *testing.T) {
	dir := t.TempDir()
	cmd := devstackCommand(t, "up", "--dir", dir, "--ctrld", ":7070")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--ctrld :7070") || !strings.Contains(string(out), "loopback") {
		t.Fatalf("want a refusal naming --ctrld and loopback, got %v:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); !os.IsNotExist(err) {
		t.Errorf("devstack started something before refusing: %s/logs exists", dir)
	}
}

// --dir is deleted by down (and by up, which starts with down) only when
// devstack made it: a directory passed by mistake is refused, untouched.
func TestDevStackNeverDeletesAForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious.txt")
	os.WriteFile(precious, []byte("keep me"), 0o600)
	for _, cmd := range []string{"down", "up"} {
		c := devstackCommand(t, cmd, "--dir", dir)
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "was not made by devstack") {
			t.Errorf("devstack %s --dir <foreign>: want a refusal, got %v:\n%s", cmd, err, out)
		}
		if _, err := os.Stat(precious); err != nil {
			t.Fatalf("devstack %s deleted a directory it did not make: %v", cmd, err)
		}
	}
}

// --mode auto picks kind exactly when a Docker engine answers and says
// why; --mode kind without one is refused with the reason before anything
// starts.
func TestChooseModeFollowsDocker(t *testing.T) {
	answers, refuses, missing := t.TempDir(), t.TempDir(), t.TempDir()
	writeScript(t, filepath.Join(answers, "docker"), `exit 0`)
	writeScript(t, filepath.Join(refuses, "docker"), `echo "Cannot connect to the Docker daemon" >&2; exit 1`)
	for _, tc := range []struct {
		path, requested, mode, says string
	}{
		{answers, modeAuto, modeKind, "a Docker engine answers"},
		{refuses, modeAuto, modeLocal, "no Docker engine answers"},
		{missing, modeAuto, modeLocal, "no docker command on PATH"},
		{answers, modeKind, modeKind, "--mode kind"},
		{refuses, modeKind, "", "--mode kind needs a Docker engine: no Docker engine answers"},
		{answers, modeLocal, modeLocal, "--mode local"},
		{answers, "minikube", "", `--mode "minikube": want auto, kind or local`},
	} {
		t.Setenv("PATH", tc.path)
		mode, why, err := chooseMode(tc.requested)
		if err != nil {
			why = err.Error()
		}
		if mode != tc.mode || !strings.Contains(why, tc.says) {
			t.Errorf("docker in %s, --mode %s: got mode %q, %q; want mode %q saying %q", filepath.Base(tc.path), tc.requested, mode, why, tc.mode, tc.says)
		}
	}
}

// The pinned kind accepts scripts/kind/cluster.yaml: it decodes the config
// strictly, asks Docker for its info and existing nodes, validates the
// config, and only then says "Creating cluster". The docker on PATH here
// answers those questions and refuses everything after them (pulls,
// networks, containers), so this never creates anything, even where a
// Docker engine runs. A config kind rejects is the control.
func TestKindAcceptsTheClusterConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kind; skipped in -short mode")
	}
	root := mustAbs(t, "../..")
	tmp := t.TempDir()
	kind := filepath.Join(tmp, "kind")
	build := exec.Command("go", "build", "-modfile=tools/kind/go.mod", "-o", kind, "sigs.k8s.io/kind")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the pinned kind: %v\n%s", err, out)
	}
	writeScript(t, filepath.Join(tmp, "docker"), `case "$1" in
info) echo '{"CgroupDriver":"systemd","CgroupVersion":"2","MemoryLimit":true,"PidsLimit":true,"CPUShares":true,"NCPU":2,"MemTotal":8000000000}';;
ps|inspect) ;;
*) echo "test docker: refuses $1" >&2; exit 1;;
esac`)
	invalid := filepath.Join(tmp, "invalid.yaml")
	os.WriteFile(invalid, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n  - role: worker\n"), 0o600)

	create := func(config string) string {
		cmd := exec.Command(kind, "create", "cluster", "--name", "deploysync-config-check", "--config", config)
		cmd.Env = append(os.Environ(), "PATH="+tmp+string(os.PathListSeparator)+os.Getenv("PATH"), "KIND_EXPERIMENTAL_PROVIDER=docker")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	const accepted = `Creating cluster "deploysync-config-check"`
	if out := create(filepath.Join(root, kindConfig)); !strings.Contains(out, accepted) {
		t.Fatalf("kind rejected %s:\n%s", kindConfig, out)
	}
	if out := create(invalid); strings.Contains(out, accepted) {
		t.Fatalf("control: kind accepted a config without a control-plane node:\n%s", out)
	}
}

func runDevstack(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := devstackCommand(t, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("devstack %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// needSSH fails the test in CI when OpenSSH's client is missing (.ci/run
// installs it), and skips it elsewhere.
func needSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		if ci.Running() {
			t.Fatal("ssh not found (Debian package openssh-client; .ci/run installs it)")
		}
		t.Skip("ssh not found (Debian package openssh-client); skipping outside CI")
	}
}

// devstackBin is devstack built once for the tests, run directly (not
// through `go run`) so that it gets the signal when the test binary dies.
var devstackBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devstack-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	devstackBin = filepath.Join(dir, "devstack")
	if out, err := exec.Command("go", "build", "-o", devstackBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build devstack: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// devstackCommand runs devstack from the repository's root, as the task
// does. A test that dies (a timeout) takes the stack down with it: SIGTERM
// makes devstack stop everything it started.
func devstackCommand(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(devstackBin, args...)
	cmd.Dir = mustAbs(t, "../..")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeScript(t *testing.T, path, body string) {
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	if err := os.WriteFile(to, []byte(readFile(t, from)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func mustAbs(t *testing.T, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
