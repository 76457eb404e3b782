package convergecheck

import (
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

// ErrNoMariaDB means mariadbd or mariadb-install-db is not installed, so
// the checker cannot run a server of its own (and cannot inject the
// MariaDB restart fault).
var ErrNoMariaDB = errors.New("convergecheck: mariadbd or mariadb-install-db not found; " +
	"scripts/ensure-mariadb.sh (go tool task db:up) installs them, or install Debian's mariadb-server-core")

// ErrMariaDBStopped means Stop has run: the server does not start again.
var ErrMariaDBStopped = errors.New("convergecheck: own MariaDB stopped")

// mariadbDirs are searched for the server binaries after PATH: Debian puts
// mariadbd in /usr/sbin, which a non-root PATH often lacks.
var mariadbDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"}

// MariaDB is a MariaDB server of the checker's own on a free loopback
// port, in a directory of its own under internal/testproc's reaped state
// root: restarting it disturbs nobody, unlike the shared test server on
// 127.0.0.1:3306, which other test packages use at the same time, and a
// killed test binary leaves neither the server nor its data behind.
type MariaDB struct {
	// DSN reaches the server (no database), as DEPLOYSYNC_TEST_MYSQL_DSN,
	// as the user testdb.DefaultDSN names.
	DSN string

	dir  string
	args []string

	// mu guards proc and stopped: a restart fault may run beside Stop.
	mu      sync.Mutex
	proc    *testproc.Process // nil while killed
	stopped bool
}

// StartMariaDB initializes a data directory and starts mariadbd on it.
// Call Stop when done.
func StartMariaDB(ctx context.Context) (*MariaDB, error) {
	server, err1 := findBinary("mariadbd")
	install, err2 := findBinary("mariadb-install-db")
	if err1 != nil || err2 != nil {
		return nil, ErrNoMariaDB
	}
	testproc.ReapStale()
	dir, err := testproc.NewDir("mariadb")
	if err != nil {
		return nil, err
	}
	m := &MariaDB{dir: dir}
	ok := false
	defer func() {
		if !ok {
			m.Stop()
		}
	}()
	asRoot := []string{}
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"} // mariadbd refuses root unless told
	}
	data := filepath.Join(dir, "data")
	initArgs := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}, asRoot...)
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
		}, asRoot...)
		cfg := user.Clone()
		cfg.Addr = "127.0.0.1:" + strconv.Itoa(ports[0])
		m.DSN = cfg.FormatDSN()
		err := m.start(ctx)
		if err != nil {
			m.kill() // a port taken in between: the next attempt has another
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return m, nil
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

// start runs mariadbd and waits until it takes connections.
func (m *MariaDB) start(ctx context.Context) error {
	p, err := m.launch()
	if err != nil {
		return err
	}
	cfg, err := mysql.ParseDSN(m.DSN)
	if err != nil {
		return err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	err = testproc.WaitFor(ctx, p, 60*time.Second, db.PingContext)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && m.stopped {
		return ErrMariaDBStopped // what killed it
	}
	return err
}

// launch starts the process, unless Stop has run.
func (m *MariaDB) launch() (*testproc.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, ErrMariaDBStopped
	}
	if m.proc != nil {
		return nil, errors.New("convergecheck: own MariaDB already running")
	}
	p, err := testproc.Start(m.dir, m.args[0], m.args[1:]...)
	if err != nil {
		return nil, err
	}
	m.proc = p
	return p, nil
}

// kill ends the server at once, as a crash would: open transactions are
// lost, committed ones stay (crash recovery replays them at the next start).
func (m *MariaDB) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
}

// Restart kills the server and starts it again on the same data and port.
// down is how long it stays away; ctx ending cuts that short, or the wait
// for the new server, with ctx's error (the server then stays down, or
// runs until Stop).
func (m *MariaDB) Restart(ctx context.Context, down time.Duration) error {
	m.kill()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return m.start(ctx)
}

// Stop kills the server and removes its directory. A restart under way
// ends with ErrMariaDBStopped; later ones start nothing.
func (m *MariaDB) Stop() {
	m.mu.Lock()
	m.stopped = true
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
	m.mu.Unlock()
	os.RemoveAll(m.dir)
}
