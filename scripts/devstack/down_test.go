package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// After a crash (`kill -9` of devstack) down stops what the pid files name
// and still runs (the console holding the terminal gets SIGTERM, on which
// it restores it; a daemon's whole process group goes), kills a local
// control plane's processes and deletes its data, drops the dev database
// on the real MariaDB, removes the state directory, and names each thing
// it stopped or removed. A pid file whose process is gone is passed over.
// Run again, down has nothing to clean.
func TestDownCleansUpAfterACrash(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, stateMarker), nil, 0o644)

	const db = "deploysync_devstack_down_test"
	createDatabase(t, db)
	os.WriteFile(filepath.Join(dir, "database"), []byte(db+"\n"), 0o644)

	// A script, as the stand-in consoles of the other tests are: its
	// command line starts with the #! interpreter.
	restored := filepath.Join(root, "console-restored")
	writeScript(t, filepath.Join(root, "console"), `trap 'echo restored > `+restored+`; exit 0' TERM; while :; do sleep 0.1; done`)
	console := startProcess(t, false, filepath.Join(root, "console"), "--ctrld-address", "127.0.0.1:7070")
	writePidFile(t, dir, "unkey-tui", console, true)
	agent := startProcess(t, true, "/bin/sh", "-c", "sleep 1000 & wait")
	writePidFile(t, dir, "agentd-eu-west", agent, false)
	gone := startProcess(t, true, "/bin/sh", "-c", "exit 0")
	<-gone.exited
	writePidFile(t, dir, "agentd-us-east", gone, false)

	plane := filepath.Join(dir, "tmp", "deploysync-testproc", "kube-999999999-1")
	os.MkdirAll(plane, 0o755)
	etcd := startProcess(t, true, "/bin/sh", "-c", "while :; do sleep 0.1; done", plane)
	os.WriteFile(filepath.Join(plane, "pids"), []byte(fmt.Sprintln(etcd.cmd.Process.Pid)), 0o600)
	os.WriteFile(filepath.Join(plane, "etcd-data"), make([]byte, 5_000_000), 0o600)

	out := runDevstack(t, nil, "down", "--dir", dir)
	for _, want := range []string{
		fmt.Sprintf("stopped unkey-tui (pid %d)", console.cmd.Process.Pid),
		fmt.Sprintf("stopped agentd-eu-west (pid %d)", agent.cmd.Process.Pid),
		fmt.Sprintf("stopped sh (pid %d) of control plane kube-999999999-1", etcd.cmd.Process.Pid),
		"removed control-plane data " + plane + " (5.0 MB)",
		"dropped database " + db,
		"removed " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("down's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "agentd-us-east") {
		t.Errorf("down claims to have stopped agentd-us-east, which had exited:\n%s", out)
	}
	for name, p := range map[string]*process{"console": console, "agent": agent, "control plane": etcd} {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the %s still runs after down", name)
		}
	}
	if got, _ := os.ReadFile(restored); string(got) != "restored\n" {
		t.Errorf("the console was not asked to quit (SIGTERM) so that it restores the terminal")
	}
	if exists, err := dropDatabase(context.Background(), db); err != nil || exists {
		t.Errorf("database %s still exists after down (%v)", db, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s behind", dir)
	}

	if out := runDevstack(t, nil, "down", "--dir", dir); !strings.Contains(out, "nothing to clean") {
		t.Errorf("a second down should have nothing to clean, said:\n%s", out)
	}
}

// The audit log names a person for what is done in the dev stack: the OS
// user, else $USER, else "dev"; never an empty name or "-dev".
func TestOperatorNameIsARealName(t *testing.T) {
	noUser := func() (*user.User, error) { return nil, errors.New("no passwd entry") }
	alice := func() (*user.User, error) { return &user.User{Username: "alice"}, nil }
	env := func(user string) func(string) string {
		return func(key string) string {
			if key == "USER" {
				return user
			}
			return ""
		}
	}
	for _, tc := range []struct {
		what    string
		current func() (*user.User, error)
		user    string
		want    string
	}{
		{"the OS user wins", alice, "bob", "alice"},
		{"no OS user: $USER", noUser, "bob", "bob"},
		{"neither (a container without USER)", noUser, "", "dev"},
	} {
		if got := operatorName(tc.current, env(tc.user)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.what, got, tc.want)
		}
	}
	if got := operatorName(user.Current, func(string) string { return "" }); got == "" || strings.HasSuffix(got, "-dev") {
		t.Errorf("this machine's operator name is %q", got)
	}
}

// process is a child the test started, with a channel closed once it exited.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startProcess(t *testing.T, ownGroup bool, argv ...string) *process {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Process.Kill() })
	return p
}

// writePidFile writes .dev/pids/<name>.json in the format the README
// documents.
func writePidFile(t *testing.T, dir, name string, p *process, terminal bool) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"name": name, "pid": p.cmd.Process.Pid, "command": p.cmd.Args,
		"log": filepath.Join(dir, "logs", name+".log"), "terminal": terminal})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids", name+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func createDatabase(t *testing.T, name string) {
	t.Helper()
	admin, err := adminDB()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE IF NOT EXISTS " + quoteIdent(name)); err != nil {
		t.Fatalf("MariaDB (scripts/ensure-mariadb.sh starts it): %v", err)
	}
	t.Cleanup(func() { dropDatabase(context.Background(), name) })
}
