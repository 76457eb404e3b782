package testproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root holds one directory per running fixture, of any test binary.
func Root() string {
	return filepath.Join(os.TempDir(), "deploysync-testproc")
}

// NewDir makes a fixture directory under Root owned by this process:
// prefix, then this process's pid, then a random suffix. The owner is in
// the name, so ReapStale never mistakes a directory being set up for an
// abandoned one.
func NewDir(prefix string) (string, error) {
	if err := os.MkdirAll(Root(), 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(Root(), fmt.Sprintf("%s-%d-", prefix, os.Getpid()))
}

// ReapStale kills the processes and removes the directories of fixtures
// whose owning test binary is gone (killed mid-test, say).
func ReapStale() {
	entries, err := os.ReadDir(Root())
	if err != nil {
		return
	}
	for _, e := range entries {
		owner, ok := ownerOf(e.Name())
		if !ok || Alive(owner) {
			continue
		}
		dir := filepath.Join(Root(), e.Name())
		for _, pid := range Recorded(dir) {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		os.RemoveAll(dir)
	}
}

// Recorded returns the processes dir's pids file lists that still run and
// belong to dir (a pid reused by something else does not).
func Recorded(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "pids"))
	var pids []int
	for _, field := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(field); err == nil && BelongsTo(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ownerOf reads the owner's pid from a directory name NewDir made.
func ownerOf(name string) (int, bool) {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	return pid, err == nil && pid > 0
}

// Alive reports whether a process with pid exists.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// BelongsTo reports whether pid is a process started for the fixture in
// dir: every child gets a flag pointing into its directory.
func BelongsTo(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte(dir))
}

// Process is one child, logging to <dir>/<name>.log.
type Process struct {
	// Name is the binary's base name.
	Name string

	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited, with err
	err  error
}

// Start runs bin with args in its own process group, killed by the kernel
// if the test binary dies, and records its pid in <dir>/pids so a later
// ReapStale can kill it should even that fail. A restarted process appends
// to its predecessor's log.
func Start(dir, bin string, args ...string) (*Process, error) {
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
	p := &Process{Name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
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

// Run starts bin as Start does and waits for it to exit; a failure names
// the end of its log. ctx ending kills it.
func Run(ctx context.Context, dir, bin string, args ...string) error {
	p, err := Start(dir, bin, args...)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
		return ctx.Err()
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w:\n%s", p.Name, p.err, p.LogTail())
	}
	return nil
}

// Pid is the process's id, which is also its process group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process is gone, for early start failures.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill stops the whole process group at once and waits for the process.
func (p *Process) Kill() {
	syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.done
}

// LogTail is the end of the process's log, for error messages.
func (p *Process) LogTail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls ready (each call bounded by a few seconds) until it
// returns nil, p exits, limit passes or ctx ends; the errors name the
// process, the last answer of ready and the end of its log.
func WaitFor(ctx context.Context, p *Process, limit time.Duration, ready func(ctx context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited during start:\n%s", p.Name, p.LogTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%v):\n%s", p.Name, limit, err, p.LogTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WithFreePorts calls start with n free loopback ports, and again with new
// ones (three attempts in all) while it fails: ports are picked free and
// then handed over, so another process can take one in between, a rare
// race that new ports settle. start must undo what it started when it
// fails.
func WithFreePorts(n int, start func(ports []int) error) error {
	var err error
	for range 3 {
		var ports []int
		if ports, err = freePorts(n); err != nil {
			return err
		}
		if err = start(ports); err == nil {
			return nil
		}
	}
	return err
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
