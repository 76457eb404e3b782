package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// process is one control-plane child, logging to <dir>/<name>.log.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

// startProcess runs bin with args in its own process group, killed by the
// kernel if the test binary dies, and records its pid in <dir>/pids so a
// later run can reap it should even that fail. A restarted process appends
// to its predecessor's log.
func startProcess(dir, bin string, args ...string) (*process, error) {
	name := filepath.Base(bin)
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	pids, err := os.OpenFile(filepath.Join(dir, "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(pids, cmd.Process.Pid)
		pids.Close()
	}
	return p, nil
}

// exited reports whether the process is gone, for early start failures.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill stops the whole process group at once and waits for the process.
func (p *process) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// logTail is the end of the process's log, for error messages.
func (p *process) logTail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// stateRoot holds one directory per running control plane.
func stateRoot() string {
	return filepath.Join(os.TempDir(), "deploysync-kubetest")
}

// reapStale kills the processes and removes the directories of control
// planes whose owning test binary is gone (killed mid-test, say).
func reapStale() {
	entries, err := os.ReadDir(stateRoot())
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(stateRoot(), e.Name())
		owner, err := readPid(filepath.Join(dir, "owner"))
		if err == nil && alive(owner) {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
			for _, field := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(field)
				if err != nil || !belongsTo(pid, dir) {
					continue // gone, or the pid was reused by something else
				}
				syscall.Kill(-pid, syscall.SIGKILL)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(dir)
	}
}

func readPid(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// belongsTo reports whether pid is a process started for the control plane
// in dir: every child gets a flag pointing into its directory.
func belongsTo(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte(dir))
}
