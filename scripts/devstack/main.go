package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/testdb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Where and how the stack runs; flags of `up` (tests use their own).
var (
	stateDir    = ".dev"
	ctrldAddr   = "127.0.0.1:7070"
	sshAddr     = "127.0.0.1:2222" // ctrld's SSH console
	database    = "deploysync_dev"
	metricsBase = 9090 // ctrld; agents take the next ports; 0 turns metrics off
	noConsole   bool
	clusterMode = modeAuto
	kindPath    string        // "" : kind on PATH, else the pinned one
	consoleBin  string        // "" : the unkey-tui just built
	windowClock time.Duration // ctrld's --window-clock: the time freeze windows are judged at, moved
)

var regions = []string{"eu-west", "us-east"}

func main() {
	cmd := "up"
	args := os.Args[1:]
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("devstack "+cmd, flag.ExitOnError)
	fs.StringVar(&stateDir, "dir", stateDir, "state directory (binaries, logs, tokens, pids)")
	fs.StringVar(&ctrldAddr, "ctrld", ctrldAddr, "ctrld's listen address, on loopback (the stack runs without TLS)")
	fs.StringVar(&sshAddr, "ssh", sshAddr, "the address ctrld serves the console over SSH on, on loopback")
	fs.StringVar(&database, "database", database, "database to (re)create for the stack")
	fs.IntVar(&metricsBase, "metrics-port", metricsBase, "ctrld's metrics port; agents use the next ones (0: off)")
	fs.DurationVar(&windowClock, "window-clock", 0, "judge freeze windows this much later than now (ctrld --window-clock), to see a recurring window close")
	fs.StringVar(&clusterMode, "mode", clusterMode, "how each region gets its cluster: auto (kind when a Docker engine answers, else local), kind or local")
	fs.StringVar(&kindPath, "kind", "", "kind binary (default: kind on PATH, else the version pinned in tools/kind)")
	fs.BoolVar(&noConsole, "no-console", false, "stop once the demo runs instead of opening the console (for tests)")
	fs.StringVar(&consoleBin, "console", "", "console binary to run in the foreground (default: the unkey-tui just built; tests pass a stand-in)")
	// `restart NAME --dir D` as well as `restart --dir D NAME`.
	var component string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		component, args = args[0], args[1:]
	}
	fs.Parse(args)
	if fs.NArg() == 1 && component == "" {
		component = fs.Arg(0)
	}
	var err error
	switch {
	case cmd == "up":
		err = up()
	case cmd == "down":
		err = down()
	case cmd == "restart" && component != "" && fs.NArg() <= 1:
		err = restart(component)
	default:
		err = fmt.Errorf("usage: devstack up | down | restart COMPONENT (components: the names of %s/pids/*.json)", stateDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// say tells the user, and .dev/devstack.log, what devstack does.
func say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Println("devstack: " + msg)
	logLine(msg)
}

// logLine appends msg to .dev/devstack.log, the record of what devstack
// did and saw, also while the console has the screen.
func logLine(msg string) {
	f, err := os.OpenFile(filepath.Join(stateDir, "devstack.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return // no state directory (yet, or any more): the screen is the record
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().Format(time.RFC3339), msg)
}

// stack is what up started: daemons, stopped newest first, then the
// clusters they ran against.
type stack struct {
	daemons  []*daemon
	teardown []func()

	mu       sync.Mutex
	stopping bool
	deaths   []string // daemons that exited on their own, as reported
}

// daemon is one background process of the stack.
type daemon struct {
	name string // its pid file's and log's name
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it exited
}

// onStop registers f to run when the stack stops, after the daemons.
func (s *stack) onStop(f func()) { s.teardown = append(s.teardown, f) }

func (s *stack) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	for i := len(s.daemons) - 1; i >= 0; i-- {
		syscall.Kill(-s.daemons[i].cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for _, d := range s.daemons {
		select {
		case <-d.done:
			continue
		case <-deadline.C:
		}
		// Out of patience: kill this one and every one still running.
		for _, d := range s.daemons {
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		}
		break
	}
	for _, d := range s.daemons {
		<-d.done
	}
	// What `devstack restart` started is no child of ours.
	var restarted []component
	for _, c := range recordedAll() {
		if c.PID != os.Getpid() {
			restarted = append(restarted, c)
		}
	}
	stopComponents(restarted)
	for i := len(s.teardown) - 1; i >= 0; i-- {
		s.teardown[i]()
	}
	os.RemoveAll(pidsDir())
	os.RemoveAll(noticesDir())
	os.Remove(kindClustersFile())
}

// start runs the daemon called name in the background, with env added to
// ours, logging to .dev/logs/<name>.log, and records it in
// .dev/pids/<name>.json.
func (s *stack) start(env []string, name, bin string, args ...string) error {
	f, err := os.Create(filepath.Join(stateDir, "logs", name+".log"))
	if err != nil {
		return err
	}
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = f, f
	// Own process group, and gone with us however we die.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: c, log: f.Name(), done: make(chan struct{})}
	s.daemons = append(s.daemons, d)
	go func() {
		c.Wait()
		f.Close()
		close(d.done)
		s.noticeExit(d)
	}()
	return record(component{Name: name, PID: c.Process.Pid, Command: c.Args, Env: env, Log: d.log})
}

// noticeExit records a daemon that exited while the stack was not
// stopping, in .dev/devstack.log at once (the console has the screen) and
// for up to print once the console is gone. An exit caused by `devstack
// restart` is no death.
func (s *stack) noticeExit(d *daemon) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	if c, err := recorded(d.name); err == nil && (c.Restarting || c.PID != d.cmd.Process.Pid) {
		logLine(fmt.Sprintf("%s (pid %d) stopped by `devstack restart`", d.name, d.cmd.Process.Pid))
		return
	}
	restartCmd := "go run ./scripts/devstack restart " + d.name
	if stateDir != ".dev" {
		restartCmd += " --dir " + stateDir
	}
	msg := d.exitReport() + "\n  restart it: " + restartCmd
	logLine(msg)
	s.deaths = append(s.deaths, msg)
	// The console has the screen: its status line says it too.
	notice := fmt.Sprintf("%s exited (%s) at %s — %s", d.name, d.cmd.ProcessState, time.Now().Format(time.TimeOnly), restartCmd)
	if err := writeNotice(d.name, notice); err != nil {
		logLine(fmt.Sprintf("could not tell the console that %s exited: %v", d.name, err))
	}
}

// noticesDir holds one file per dead component, named for it, whose line
// the console shows (its --notices) until restart removes it.
func noticesDir() string { return filepath.Join(stateDir, "notices") }

func writeNotice(name, line string) error {
	if err := os.MkdirAll(noticesDir(), 0o755); err != nil {
		return err
	}
	// Written whole and renamed, so the console never reads half a line.
	tmp := filepath.Join(stateDir, name+".notice.tmp")
	if err := os.WriteFile(tmp, []byte(line+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(noticesDir(), name))
}

// exitReport says that the daemon exited, how, and what its log ends with.
func (d *daemon) exitReport() string {
	tail, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	lines = lines[max(0, len(lines)-5):]
	return fmt.Sprintf("%s (pid %d) exited (%s) at %s; the end of %s:\n  %s", d.name, d.cmd.Process.Pid, d.cmd.ProcessState,
		time.Now().Format(time.TimeOnly), d.log, strings.Join(lines, "\n  "))
}

func up() error {
	start := time.Now()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if !dial.Loopback(ctrldAddr) {
		// ctrld and the clients would refuse plaintext there anyway.
		return fmt.Errorf("--ctrld %s: the stack runs without TLS, so ctrld listens on a loopback address (e.g. 127.0.0.1:7070)", ctrldAddr)
	}
	if !dial.Loopback(sshAddr) {
		// Its keys are the dev stack's, lying in .dev for anyone on
		// this machine who can read it.
		return fmt.Errorf("--ssh %s: the dev stack's console over SSH listens on a loopback address (e.g. 127.0.0.1:2222)", sshAddr)
	}
	if err := down(); err != nil { // whatever a crashed run left
		return err
	}
	if err := portsFree(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "logs"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stateDir, stateMarker), []byte("state of scripts/devstack; `devstack down` deletes this directory\n"), 0o644); err != nil {
		return err
	}
	if err := record(component{Name: "devstack", PID: os.Getpid(), Command: os.Args, Terminal: true, Log: filepath.Join(stateDir, "devstack.log")}); err != nil {
		return err
	}
	// The local control planes keep their data (etcd's alone is tens of
	// megabytes) in the state directory, where down finds it after a crash.
	tmp, err := filepath.Abs(tmpDir())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	os.Setenv("TMPDIR", tmp)
	mode, why, err := chooseMode(clusterMode)
	if err != nil {
		return err
	}
	say("%s", why)

	s := &stack{}
	defer s.stop()

	say("building ctrld, agentd, unkey-tui and trafficsim")
	bin, _ := filepath.Abs(filepath.Join(stateDir, "bin"))
	// Built as the Dockerfiles build the daemons (static, -trimpath), so
	// their packages are the ones scripts/static-build.sh compiled (CI
	// runs it first): on a fresh machine only the binaries' own packages
	// are left to compile, not the whole world again with cgo.
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./cmd/ctrld", "./cmd/agentd", "./cmd/unkey-tui", "./cmd/trafficsim")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}

	var clusters []regionCluster
	if mode == modeKind {
		clusters, err = startKind(ctx, s)
	} else {
		clusters, err = startLocal(ctx, s)
	}
	if err != nil {
		return err
	}
	if err := startRegionMetrics(ctx, s, bin, clusters); err != nil {
		return err
	}

	dsn, err := devDatabase(ctx)
	if err != nil {
		return err
	}
	env := []string{"CTRLD_DATABASE_DSN=" + dsn}
	run := func(args ...string) (string, error) {
		c := exec.Command(filepath.Join(bin, "ctrld"), args...)
		c.Env = append(os.Environ(), env...)
		out, err := c.Output()
		if ee := new(exec.ExitError); errors.As(err, &ee) {
			return "", fmt.Errorf("ctrld %s: %s", strings.Join(args, " "), ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	if _, err := run("migrate"); err != nil {
		return err
	}
	operator := operatorName(user.Current, os.Getenv)
	opToken, err := run("token", "create", "--operator", operator, "--logs") // the console on it reads logs, as the operator key does
	if err != nil {
		return err
	}
	os.WriteFile(filepath.Join(stateDir, "operator.token"), []byte(opToken+"\n"), 0o600)
	// The console over SSH: a key pair per role, registered for the
	// operator as `ctrld operator add-key` registers anyone's.
	for _, k := range devKeys() {
		if err := k.ensure(); err != nil {
			return fmt.Errorf("SSH key %s: %w", k.file, err)
		}
		args := []string{"operator", "add-key", "--role", k.role}
		if k.role == "operator" {
			args = append(args, "--logs") // the operator reads logs; the read-only key may not
		}
		if _, err := run(append(args, operator, k.file+".pub")...); err != nil {
			return err
		}
	}

	say("starting ctrld on %s (metrics %s), its console over SSH on %s", ctrldAddr, orOff(metricsAddr(0)), sshAddr)
	if err := s.start(env, "ctrld", filepath.Join(bin, "ctrld"), "serve", "--listen", ctrldAddr, "--metrics-listen", metricsAddr(0),
		"--ssh-listen", sshAddr, "--ssh-host-key", hostKeyFile(), "--ssh-generate-host-key", "--window-clock", windowClock.String()); err != nil {
		return err
	}
	for i, c := range clusters {
		r := c.region
		token, err := run("token", "create", "--region", r)
		if err != nil {
			return err
		}
		tokenFile := filepath.Join(stateDir, r+".token")
		os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
		say("starting agentd for %s (metrics %s)", r, orOff(metricsAddr(1+i)))
		agentArgs := []string{"--region", r, "--identity", "agentd-" + r + "-0",
			"--ctrld-address", ctrldAddr, "--insecure", "--token-file", tokenFile, "--kubeconfig", c.kubeconfig,
			"--metrics-listen", metricsAddr(1 + i)}
		// The region's own Prometheus, which its agent asks for the
		// rollouts' checks.
		agentArgs = append(agentArgs, "--prometheus-url", c.prometheusURL)
		if err := s.start(nil, "agentd-"+r, filepath.Join(bin, "agentd"), agentArgs...); err != nil {
			return err
		}
	}

	conn, err := dial.Ctrld(dial.Options{Address: ctrldAddr, Token: opToken, Insecure: true})
	if err != nil {
		return err
	}
	defer conn.Close()
	op := ctrlv1.NewOperatorServiceClient(conn)
	say("deploying the demo: nginx:1.27, 3 replicas in %s", strings.Join(regions, " and "))
	deployed := time.Now()
	if err := s.retry(ctx, 15*time.Second, func() error {
		_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "demo", WorkspaceId: "acme", EnvironmentId: "dev",
			Image: "nginx:1.27", CpuMillicores: 100, MemoryMib: 64, Port: 80, Regions: regions, Replicas: 3})
		return err
	}); err != nil {
		return fmt.Errorf("deploy the demo: %w", err)
	}
	// kind pulls the image for real; the local clusters' kwok only pretends to.
	var first time.Duration
	pending := clusters
	if err := s.retry(ctx, 5*time.Minute, func() error {
		var still []regionCluster
		for _, c := range pending {
			if err := demoPodRunning(ctx, c.config); err != nil {
				still = append(still, c)
			} else if first == 0 {
				first = time.Since(deployed)
				say("first Running pod (%s) %s after the deploy, %s after `task dev` started", c.region, first.Round(time.Millisecond), time.Since(start).Round(time.Second))
			}
		}
		if pending = still; len(pending) > 0 {
			return fmt.Errorf("no demo pod Running yet in %s", pending[0].region)
		}
		return nil
	}); err != nil {
		return err
	}
	say("the demo runs in every region %s after the deploy", time.Since(deployed).Round(time.Millisecond))
	// The metric gates' whole chain: API server, simulator, Prometheus.
	if err := s.retry(ctx, time.Minute, func() error {
		for _, c := range clusters {
			if err := demoTrafficSeen(ctx, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	say("%s", prometheusSummary(clusters))
	// ctrld made its host key before it served the deploy.
	if err := writeKnownHosts(10 * time.Second); err != nil {
		return err
	}
	keys := devKeys()
	say("the console over SSH, as on-call engineers reach it (from another terminal; audited as %q with the key's fingerprint):\n  %s\n  read-only (sees everything, changes nothing):\n  %s", operator, sshCommand(keys[0]), sshCommand(keys[1]))
	if noConsole {
		say("stack is up; stopping it (--no-console)")
		return nil
	}
	say("operator token (actions audited as %q) in %s/operator.token; logs in %s/logs; pid files in %s; kubeconfigs in %s/kube", operator, stateDir, stateDir, pidsDir(), stateDir)
	say("a component that dies is logged to %s/devstack.log and listed when the console exits; `go run ./scripts/devstack restart NAME` restarts it", stateDir)
	say("starting the console (q quits and stops the stack)")
	time.Sleep(time.Second)

	if consoleBin == "" {
		consoleBin = filepath.Join(bin, "unkey-tui")
	}
	notices, err := filepath.Abs(noticesDir())
	if err != nil {
		return err
	}
	if err := s.runConsole(ctx, consoleBin, "--ctrld-address", ctrldAddr, "--insecure",
		"--token-file", filepath.Join(stateDir, "operator.token"), "--notices", notices); err != nil && ctx.Err() == nil {
		say("console exited: %v", err)
	}
	for _, death := range s.deathsSoFar() {
		say("while the stack ran, %s", death)
	}
	say("stopping the stack")
	return nil
}

// runConsole runs the console in the foreground on our terminal (stdin,
// stdout and stderr as they are: devstack neither hides nor replaces them)
// until it exits. It gets SIGTERM, on which it restores the terminal,
// when ctx ends and when devstack dies, however it dies.
func (s *stack) runConsole(ctx context.Context, bin string, args ...string) error {
	tui := exec.CommandContext(ctx, bin, args...)
	tui.Stdin, tui.Stdout, tui.Stderr = os.Stdin, os.Stdout, os.Stderr
	tui.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	tui.Cancel = func() error { return tui.Process.Signal(syscall.SIGTERM) }
	tui.WaitDelay = stopPatience
	if err := tui.Start(); err != nil {
		return err
	}
	// Recorded, so that down finds a console a crash left behind.
	if err := record(component{Name: "unkey-tui", PID: tui.Process.Pid, Command: tui.Args, Terminal: true}); err != nil {
		tui.Process.Signal(syscall.SIGTERM)
		tui.Wait()
		return err
	}
	return tui.Wait()
}

// deathsSoFar is what noticeExit recorded.
func (s *stack) deathsSoFar() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deaths
}

// operatorName is who the dev stack's operator token is for, so that the
// audit log names a person: the OS user, else $USER, else "dev".
func operatorName(current func() (*user.User, error), getenv func(string) string) string {
	if u, err := current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := getenv("USER"); name != "" {
		return name
	}
	return "dev"
}

// devDatabase makes sure MariaDB runs and gives the stack a fresh database.
func devDatabase(ctx context.Context) (string, error) {
	ensure := exec.Command("bash", "scripts/ensure-mariadb.sh")
	ensure.Stdout, ensure.Stderr = os.Stdout, os.Stderr
	if err := ensure.Run(); err != nil {
		return "", fmt.Errorf("MariaDB: %w", err)
	}
	if err := os.WriteFile(databaseFile(), []byte(database+"\n"), 0o644); err != nil {
		return "", err
	}
	admin, err := adminDB()
	if err != nil {
		return "", err
	}
	defer admin.Close()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + quoteIdent(database), "CREATE DATABASE " + quoteIdent(database)} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
	}
	cfg, err := mysql.ParseDSN(testdb.DefaultDSN)
	if err != nil {
		return "", err
	}
	cfg.DBName = database
	return cfg.FormatDSN(), nil
}

func demoPodRunning(ctx context.Context, config *rest.Config) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "unkey.deployment.id=demo"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			return nil
		}
	}
	return errors.New("no demo pod Running yet")
}

// metricsAddr is the metrics address of the i-th daemon ("" when off).
func metricsAddr(i int) string {
	if metricsBase == 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(metricsBase+i)
}

func orOff(addr string) string {
	if addr == "" {
		return "off"
	}
	return addr
}

// retry calls f until it succeeds, within runs out or a daemon of the
// stack dies (then waiting on is pointless, and its log says why).
func (s *stack) retry(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		if err := s.exited(); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exited reports the first daemon that is no longer running, with the end
// of its log.
func (s *stack) exited() error {
	for _, d := range s.daemons {
		select {
		case <-d.done:
			return errors.New(d.exitReport())
		default:
		}
	}
	return nil
}

// portsFree fails, naming the flag to change, when an address the stack
// would listen on is taken (a stack already running, Prometheus on 9090).
func portsFree() error {
	// In the order the flags give them (ctrld's, then ctrld's metrics port
	// and the agents' after it), so the first taken one named is the first
	// the user would look at.
	type want struct{ addr, flag string }
	wants := []want{{ctrldAddr, "--ctrld"}, {sshAddr, "--ssh"}}
	for i := range 1 + len(regions) {
		if a := metricsAddr(i); a != "" {
			wants = append(wants, want{a, "--metrics-port (0 turns metrics off)"})
		}
	}
	for _, w := range wants {
		l, err := net.Listen("tcp", w.addr)
		if err != nil {
			return fmt.Errorf("%s is taken (%v): stop what listens there (`go tool task dev:down` if it is an earlier stack) or pass %s", w.addr, err, w.flag)
		}
		l.Close()
	}
	return nil
}
