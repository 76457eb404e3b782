package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A fixture directory of a live test binary is left alone; one whose owner
// is gone is removed, and the processes started in it are killed.
func TestReapStaleKillsOnlyWhatDeadOwnersLeft(t *testing.T) {
	live, err := NewDir("live")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(Root(), fmt.Sprintf("stale-%d-1", dead.Process.Pid))
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stale)
	// $0 names the directory, as every child's flags do.
	p, err := Start(stale, "/bin/sh", "-c", "sleep 60", stale)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()

	ReapStale()

	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live owner's directory was reaped: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead owner's directory survived (stat: %v)", err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Errorf("the dead owner's process %d still runs", p.Pid())
	}
}
