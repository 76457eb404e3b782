package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// component is one process of the stack as .dev/pids/<name>.json records
// it: enough for `down` to tell it from a process that reuses its pid and
// stop it, and for `restart` to start it again the same way.
type component struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Command is the argv it runs, argv[0] absolute.
	Command []string `json:"command"`
	// Env is what it runs with on top of the environment of whoever
	// starts it (ctrld's database DSN).
	Env []string `json:"env,omitempty"`
	Log string   `json:"log,omitempty"`
	// Terminal marks devstack and the console, which run in the terminal
	// `task dev` was started from: stopped by down, never restarted alone.
	Terminal bool `json:"terminal,omitempty"`
	// Restarting is set by restart before it stops the process, so that
	// devstack does not report the exit as a death.
	Restarting bool `json:"restarting,omitempty"`
}

// errNoComponent means no pid file names the component.
var errNoComponent = errors.New("no such component")

func pidsDir() string { return filepath.Join(stateDir, "pids") }

func pidFile(name string) string { return filepath.Join(pidsDir(), name+".json") }

// record writes c's pid file, replacing an earlier one of the same name.
func record(c component) error {
	if err := os.MkdirAll(pidsDir(), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	// Written whole and renamed, so a reader never sees half a record.
	tmp := pidFile(c.Name) + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, pidFile(c.Name))
}

// recorded reads the pid file of one component.
func recorded(name string) (component, error) {
	var c component
	data, err := os.ReadFile(pidFile(name))
	if os.IsNotExist(err) {
		return c, fmt.Errorf("%s: %w (the pid files in %s name %s)", name, errNoComponent, pidsDir(), strings.Join(componentNames(), ", "))
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", pidFile(name), err)
	}
	return c, nil
}

// recordedAll reads every pid file, in name order.
func recordedAll() []component {
	var all []component
	for _, name := range componentNames() {
		if c, err := recorded(name); err == nil {
			all = append(all, c)
		}
	}
	return all
}

func componentNames() []string {
	files, _ := filepath.Glob(filepath.Join(pidsDir(), "*.json"))
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	sort.Strings(names)
	return names
}

// running reports whether the recorded process still runs: its pid runs
// exactly the recorded command line, or (a script) its #! interpreter
// with that command line after it. A pid left by a crash may belong to
// something else by now, and an exited child not yet waited for has none.
func (c component) running() bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.PID))
	want := strings.Join(c.Command, "\x00") + "\x00"
	return err == nil && c.PID > 0 && (string(cmdline) == want || strings.HasSuffix(string(cmdline), "\x00"+want))
}

// stopPatience is how long a component gets to exit on SIGTERM (the
// console restores the terminal, ctrld closes its streams) before SIGKILL.
const stopPatience = 10 * time.Second

// stopComponents stops the recorded processes that still run: SIGTERM to
// each (and its process group, for the daemons that have one), then
// SIGKILL to whatever is left after stopPatience. It returns those it
// stopped.
func stopComponents(cs []component) []component {
	var live []component
	for _, c := range cs {
		if c.running() {
			live = append(live, c)
			signalComponent(c, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(stopPatience)
	for _, c := range live {
		for c.running() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if c.running() {
			signalComponent(c, syscall.SIGKILL)
		}
	}
	return live
}

// signalComponent signals the process and, for a daemon, its process
// group (the console and devstack share the terminal's and are alone in
// it among ours).
func signalComponent(c component, sig syscall.Signal) {
	if !c.Terminal {
		syscall.Kill(-c.PID, sig)
	}
	syscall.Kill(c.PID, sig)
}

// restart stops one daemon of the stack (if it runs) and starts it again
// with its recorded command, environment and log. The new process is not
// devstack's child: it keeps running after this command returns, and
// devstack (on exit) or down stops it through its pid file.
func restart(name string) error {
	c, err := recorded(name)
	if err != nil {
		return err
	}
	if c.Terminal {
		return fmt.Errorf("%s runs in the terminal of `go tool task dev` and cannot be restarted alone: quit the console (q) and run `go tool task dev` again", name)
	}
	if c.running() {
		c.Restarting = true
		if err := record(c); err != nil {
			return err
		}
		say("stopping %s (pid %d)", name, c.PID)
		stopComponents([]component{c})
	}
	log, err := os.OpenFile(c.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "--- restarted by `devstack restart %s` at %s\n", name, time.Now().Format(time.RFC3339))
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	old := c.PID
	c.PID, c.Restarting = cmd.Process.Pid, false
	if err := record(c); err != nil {
		return err
	}
	cmd.Process.Release()
	os.Remove(filepath.Join(noticesDir(), name)) // the console stops saying it died
	say("started %s (pid %d, was %d); log %s", name, c.PID, old, c.Log)
	return nil
}
