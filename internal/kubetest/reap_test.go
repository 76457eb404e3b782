package kubetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/testproc"
)

const helperEnv = "KUBETEST_HELPER_START"

// TestMain doubles as the helper process of the reaping test: run with
// helperEnv set, the test binary starts a control plane, prints its
// directory and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" {
		os.Exit(m.Run())
	}
	c, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("DIR", c.Dir)
	time.Sleep(time.Minute)
	os.Exit(1)
}

// A test binary killed mid-test (SIGKILL: no cleanup runs) must leave no
// etcd/apiserver processes or data directories behind once the next run
// starts.
func TestKilledRunIsReapedByNextStart(t *testing.T) {
	if testing.Short() {
		t.Skip("kubetest: needs a Kubernetes control plane; skipped in -short mode")
	}
	if _, err := binDir(); err != nil {
		StartForTest(t, Options{}) // fails in CI, skips elsewhere, with the reason
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, "DIR "); ok {
			dir = rest
			break
		}
		if strings.HasPrefix(line, "ERROR") {
			t.Fatal(line)
		}
	}
	if dir == "" {
		t.Fatal("helper never reported its control plane")
	}
	pids := childPids(t, dir)
	if len(pids) != 2 {
		t.Fatalf("want etcd and kube-apiserver running, got pids %v", pids)
	}
	cmd.Process.Kill()
	cmd.Wait()

	testproc.ReapStale()

	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s survived the reaping (stat: %v)", dir, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for testproc.Alive(pid) && testproc.BelongsTo(pid, dir) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if testproc.Alive(pid) && testproc.BelongsTo(pid, dir) {
			t.Errorf("process %d of the killed run is still running", pid)
		}
	}
}

func childPids(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		var pid int
		fmt.Sscan(f, &pid)
		pids = append(pids, pid)
	}
	return pids
}
