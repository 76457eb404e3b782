package testmariadb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testproc"
)

// ErrNotInstalled means mariadbd or mariadb-install-db is not installed, so
// no server of a test's own can run.
var ErrNotInstalled = errors.New("testmariadb: mariadbd or mariadb-install-db not found; " +
	"scripts/ensure-mariadb.sh (go tool task db:up) installs them, or install Debian's mariadb-server")

// ErrStopped means Stop has run: the server does not start again.
var ErrStopped = errors.New("testmariadb: server stopped")

// mariadbDirs are searched for the server binaries after PATH: Debian puts
// mariadbd in /usr/sbin, which a non-root PATH often lacks.
var mariadbDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"}

// Server is a MariaDB server of a test's own, on a free loopback port.
type Server struct {
	// DSN reaches the server (no database), as DEPLOYSYNC_TEST_MYSQL_DSN,
	// as the user testdb.DefaultDSN names.
	DSN string

	dir  string
	args []string
	// probeDSN is what start connects with to see the server ready (DSN
	// unless set), and synced, when set, must also hold (a Galera node
	// must have joined its cluster).
	probeDSN string
	synced   func(ctx context.Context, db *sql.DB) error
	// restartArgs, when set, is asked before every start after the
	// first for the extra arguments that one needs (where a Galera node
	// left off in the cluster's history).
	restartArgs func(ctx context.Context) ([]string, error)

	// mu guards proc and stopped: a restart fault may run beside Stop.
	mu      sync.Mutex
	proc    *testproc.Process // nil while killed
	stopped bool
}

// Start initializes a data directory and starts mariadbd on it. Call Stop
// when done.
func Start(ctx context.Context) (*Server, error) {
	server, err1 := findBinary("mariadbd")
	install, err2 := findBinary("mariadb-install-db")
	if err1 != nil || err2 != nil {
		return nil, ErrNotInstalled
	}
	testproc.ReapStale()
	dir, err := testproc.NewDir("mariadb")
	if err != nil {
		return nil, err
	}
	m := &Server{dir: dir}
	ok := false
	defer func() {
		if !ok {
			m.Stop()
		}
	}()
	data := filepath.Join(dir, "data")
	initArgs := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}, asRoot()...)
	if err := testproc.Run(ctx, dir, install, initArgs...); err != nil {
		return nil, err
	}
	// The user the tests connect as, as on the shared server: testdb's.
	user, err := mysql.ParseDSN(testdb.DefaultDSN)
	if err != nil {
		return nil, err
	}
	initFile := filepath.Join(dir, "init.sql") // runs at every start
	if err := os.WriteFile(initFile, []byte(userSQL(user.User, user.Passwd)), 0o600); err != nil {
		return nil, err
	}
	err = testproc.WithFreePorts(1, func(ports []int) error {
		m.args = append([]string{server, "--no-defaults",
			"--datadir=" + data,
			"--bind-address=127.0.0.1",
			"--port=" + strconv.Itoa(ports[0]),
			// A short path: the socket's must fit in 108 bytes.
			"--socket=" + filepath.Join(dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--init-file=" + initFile,
			"--skip-name-resolve",
			"--max-connections=1000",
			"--innodb-buffer-pool-size=64M",
			// Commits reach the OS at once, so they survive the process
			// being killed, which is the fault; not fsynced, which only a
			// machine crash would need.
			"--innodb-flush-log-at-trx-commit=2",
		}, asRoot()...)
		cfg := user.Clone()
		cfg.Addr = "127.0.0.1:" + strconv.Itoa(ports[0])
		m.DSN = cfg.FormatDSN()
		err := m.start(ctx)
		if err != nil {
			m.Kill() // a port taken in between: the next attempt has another
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// asRoot is what mariadbd and mariadb-install-db need to run as root,
// which they refuse unless told.
func asRoot() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// userSQL creates user on the server as scripts/ensure-mariadb.sh does on
// the shared one.
func userSQL(user, password string) string {
	var out string
	for _, host := range []string{"127.0.0.1", "localhost"} {
		out += fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY '%s';\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%s';\n",
			user, host, password, user, host)
	}
	return out
}

func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range mariadbDirs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// start runs mariadbd, with extra arguments this once, and waits until it
// takes connections (and, for a Galera node, has joined its cluster).
func (m *Server) start(ctx context.Context, extra ...string) error {
	p, err := m.launch(extra)
	if err != nil {
		return err
	}
	cfg, err := mysql.ParseDSN(cmp.Or(m.probeDSN, m.DSN))
	if err != nil {
		return err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ready := db.PingContext
	if m.synced != nil {
		ready = func(ctx context.Context) error { return m.synced(ctx, db) }
	}
	// A joining Galera node first copies a donor's whole data directory.
	err = testproc.WaitFor(ctx, p, 90*time.Second, ready)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && m.stopped {
		return ErrStopped // what killed it
	}
	return err
}

// launch starts the process with extra arguments, unless Stop has run.
func (m *Server) launch(extra []string) (*testproc.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, ErrStopped
	}
	if m.proc != nil {
		return nil, errors.New("testmariadb: server already running")
	}
	p, err := testproc.Start(m.dir, m.args[0], append(m.args[1:len(m.args):len(m.args)], extra...)...)
	if err != nil {
		return nil, err
	}
	m.proc = p
	return p, nil
}

// Kill ends the server at once, as a crash would: open transactions are
// lost, committed ones stay (crash recovery replays them at the next start).
// Start brings it back.
func (m *Server) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
}

// Start starts a killed server again on the same data and port (a Galera
// node rejoins its cluster) and waits until it is ready.
func (m *Server) Start(ctx context.Context) error {
	var extra []string
	if m.restartArgs != nil {
		var err error
		if extra, err = m.restartArgs(ctx); err != nil {
			return err
		}
	}
	return m.start(ctx, extra...)
}

// Restart kills the server and starts it again on the same data and port.
// down is how long it stays away; ctx ending cuts that short, or the wait
// for the new server, with ctx's error (the server then stays down, or
// runs until Stop).
func (m *Server) Restart(ctx context.Context, down time.Duration) error {
	m.Kill()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return m.Start(ctx)
}

// Stop kills the server and removes its directory. A restart under way
// ends with ErrStopped; later ones start nothing.
func (m *Server) Stop() {
	m.mu.Lock()
	m.stopped = true
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
	m.mu.Unlock()
	os.RemoveAll(m.dir)
}
