package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
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
	database    = "deploysync_dev"
	metricsBase = 9090 // ctrld; agents take the next ports; 0 turns metrics off
	noConsole   bool
	clusterMode = modeAuto
	kindPath    string // "" : kind on PATH, else the pinned one
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
	fs.StringVar(&database, "database", database, "database to (re)create for the stack")
	fs.IntVar(&metricsBase, "metrics-port", metricsBase, "ctrld's metrics port; agents use the next ones (0: off)")
	fs.StringVar(&clusterMode, "mode", clusterMode, "how each region gets its cluster: auto (kind when a Docker engine answers, else local), kind or local")
	fs.StringVar(&kindPath, "kind", "", "kind binary (default: kind on PATH, else the version pinned in tools/kind)")
	fs.BoolVar(&noConsole, "no-console", false, "stop once the demo runs instead of opening the console (for tests)")
	fs.Parse(args)
	var err error
	switch cmd {
	case "up":
		err = up()
	case "down":
		err = down()
	default:
		err = fmt.Errorf("usage: devstack [up|down]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("devstack: "+format+"\n", args...) }

// stack is what up started: daemons, stopped newest first, then the
// clusters they ran against.
type stack struct {
	daemons  []*daemon
	teardown []func()
}

// daemon is one background process of the stack.
type daemon struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it exited
}

// onStop registers f to run when the stack stops, after the daemons.
func (s *stack) onStop(f func()) { s.teardown = append(s.teardown, f) }

func (s *stack) stop() {
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
	for i := len(s.teardown) - 1; i >= 0; i-- {
		s.teardown[i]()
	}
	os.Remove(filepath.Join(stateDir, "pids"))
	os.Remove(kindClustersFile())
}

// start runs a daemon in the background, logging to .dev/logs/<log>; env
// nil inherits ours.
func (s *stack) start(env []string, log, name string, args ...string) error {
	f, err := os.Create(filepath.Join(stateDir, "logs", log))
	if err != nil {
		return err
	}
	c := exec.Command(name, args...)
	c.Env = env
	c.Stdout, c.Stderr = f, f
	// Own process group, and gone with us however we die.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start %s: %w", filepath.Base(name), err)
	}
	d := &daemon{cmd: c, log: f.Name(), done: make(chan struct{})}
	go func() { c.Wait(); f.Close(); close(d.done) }()
	s.daemons = append(s.daemons, d)
	pids, err := os.OpenFile(filepath.Join(stateDir, "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(pids, c.Process.Pid)
		pids.Close()
	}
	return nil
}

func up() error {
	start := time.Now()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if !dial.Loopback(ctrldAddr) {
		// ctrld and the clients would refuse plaintext there anyway.
		return fmt.Errorf("--ctrld %s: the stack runs without TLS, so ctrld listens on a loopback address (e.g. 127.0.0.1:7070)", ctrldAddr)
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
	mode, why, err := chooseMode(clusterMode)
	if err != nil {
		return err
	}
	say("%s", why)

	s := &stack{}
	defer s.stop()

	say("building ctrld, agentd and unkey-tui")
	bin, _ := filepath.Abs(filepath.Join(stateDir, "bin"))
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/ctrld", "./cmd/agentd", "./cmd/unkey-tui")
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

	dsn, err := devDatabase(ctx)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "CTRLD_DATABASE_DSN="+dsn)
	run := func(args ...string) (string, error) {
		c := exec.Command(filepath.Join(bin, "ctrld"), args...)
		c.Env = env
		out, err := c.Output()
		if ee := new(exec.ExitError); errors.As(err, &ee) {
			return "", fmt.Errorf("ctrld %s: %s", strings.Join(args, " "), ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	if _, err := run("migrate"); err != nil {
		return err
	}
	opToken, err := run("token", "create", "--operator", os.Getenv("USER")+"-dev")
	if err != nil {
		return err
	}
	os.WriteFile(filepath.Join(stateDir, "operator.token"), []byte(opToken+"\n"), 0o600)

	say("starting ctrld on %s (metrics %s)", ctrldAddr, orOff(metricsAddr(0)))
	if err := s.start(env, "ctrld.log", filepath.Join(bin, "ctrld"), "serve", "--listen", ctrldAddr, "--metrics-listen", metricsAddr(0)); err != nil {
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
		if err := s.start(nil, "agentd-"+r+".log", filepath.Join(bin, "agentd"), "--region", r, "--identity", "agentd-"+r+"-0",
			"--ctrld-address", ctrldAddr, "--insecure", "--token-file", tokenFile, "--kubeconfig", c.kubeconfig,
			"--metrics-listen", metricsAddr(1+i)); err != nil {
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
	if noConsole {
		say("stack is up; stopping it (--no-console)")
		return nil
	}
	say("logs in %s/logs; operator token in %s/operator.token; starting the console (q quits and stops the stack)", stateDir, stateDir)
	time.Sleep(time.Second)

	tui := exec.CommandContext(ctx, filepath.Join(bin, "unkey-tui"), "--ctrld-address", ctrldAddr, "--insecure",
		"--token-file", filepath.Join(stateDir, "operator.token"))
	tui.Stdin, tui.Stdout, tui.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := tui.Run(); err != nil && ctx.Err() == nil {
		say("console exited: %v", err)
	}
	say("stopping the stack")
	return nil
}

// devDatabase makes sure MariaDB runs and gives the stack a fresh database.
func devDatabase(ctx context.Context) (string, error) {
	ensure := exec.Command("bash", "scripts/ensure-mariadb.sh")
	ensure.Stdout, ensure.Stderr = os.Stdout, os.Stderr
	if err := ensure.Run(); err != nil {
		return "", fmt.Errorf("MariaDB: %w", err)
	}
	cfg, err := mysql.ParseDSN(testdb.DefaultDSN)
	if err != nil {
		return "", err
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", err
	}
	defer admin.Close()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + database, "CREATE DATABASE " + database} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
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
			tail, _ := os.ReadFile(d.log)
			lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
			lines = lines[max(0, len(lines)-5):]
			return fmt.Errorf("%s exited (%s); the end of %s:\n  %s", filepath.Base(d.cmd.Path), d.cmd.ProcessState, d.log, strings.Join(lines, "\n  "))
		default:
		}
	}
	return nil
}

// portsFree fails, naming the flag to change, when an address the stack
// would listen on is taken (a stack already running, Prometheus on 9090).
func portsFree() error {
	addrs := map[string]string{ctrldAddr: "--ctrld"}
	for i := range 1 + len(regions) {
		if a := metricsAddr(i); a != "" {
			addrs[a] = "--metrics-port (0 turns metrics off)"
		}
	}
	for addr, flag := range addrs {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s is taken (%v): stop what listens there (`go tool task dev:down` if it is an earlier stack) or pass %s", addr, err, flag)
		}
		l.Close()
	}
	return nil
}

// down stops whatever a previous up left running, deletes the kind
// clusters it created, and removes its state.
func down() error {
	entries, err := os.ReadDir(stateDir)
	if os.IsNotExist(err) || (err == nil && len(entries) == 0) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(stateDir, stateMarker)); err != nil {
		return fmt.Errorf("%s exists but was not made by devstack (no %s in it); refusing to delete it: pass a new --dir (or delete it yourself if it is an old stack's)", stateDir, stateMarker)
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "pids"))
	if err == nil {
		bin, _ := filepath.Abs(filepath.Join(stateDir, "bin"))
		for _, f := range strings.Fields(string(data)) {
			// A pid left by a crash may belong to something else by now:
			// only kill what still runs one of our binaries.
			pid, err := strconv.Atoi(f)
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err == nil && strings.HasPrefix(exe, bin+string(filepath.Separator)) {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
	deleteRecordedKindClusters()
	return os.RemoveAll(stateDir)
}

// stateMarker marks a state directory as devstack's, so that down never
// deletes a directory a user passed by mistake.
const stateMarker = ".devstack"
