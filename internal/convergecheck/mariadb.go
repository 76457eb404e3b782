package convergecheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrNoMariaDB means mariadbd or mariadb-install-db is not installed, so
// the checker cannot run a server of its own (and leaves the MariaDB
// restart fault out).
var ErrNoMariaDB = errors.New("convergecheck: mariadbd and mariadb-install-db not found")

// MariaDB is a MariaDB server of the checker's own on a free loopback
// port, in a directory of its own: restarting it disturbs nobody, unlike
// the shared test server on 127.0.0.1:3306, which other test packages use
// at the same time.
type MariaDB struct {
	// DSN reaches the server (no database), as DEPLOYSYNC_TEST_MYSQL_DSN.
	DSN string

	dir  string
	args []string
	proc *exec.Cmd
	done chan struct{}
}

// StartMariaDB initializes a data directory and starts mariadbd on it.
// Call Stop when done.
func StartMariaDB(ctx context.Context) (*MariaDB, error) {
	server, err1 := findBinary("mariadbd")
	install, err2 := findBinary("mariadb-install-db")
	if err1 != nil || err2 != nil {
		return nil, ErrNoMariaDB
	}
	// A short path: the server's Unix socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "convergecheck-db-")
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
	if out, err := exec.CommandContext(ctx, install, initArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	// Runs at every start: the user the tests connect as.
	initFile := filepath.Join(dir, "init.sql")
	if err := os.WriteFile(initFile, []byte(
		"CREATE USER IF NOT EXISTS 'deploysync'@'%' IDENTIFIED BY 'deploysync';\n"+
			"GRANT ALL PRIVILEGES ON *.* TO 'deploysync'@'%';\n"), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	m.args = append([]string{server, "--no-defaults",
		"--datadir=" + data,
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(port),
		"--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "mariadbd.log"),
		"--init-file=" + initFile,
		"--skip-name-resolve",
		"--max-connections=1000",
		"--innodb-buffer-pool-size=64M",
		// Commits reach the OS at once, so they survive the process being
		// killed, which is the fault; not fsynced, which only a machine
		// crash would need.
		"--innodb-flush-log-at-trx-commit=2",
	}, asRoot...)
	m.DSN = fmt.Sprintf("deploysync:deploysync@tcp(127.0.0.1:%d)/", port)
	if err := m.start(ctx); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs mariadbd and waits until it takes connections.
func (m *MariaDB) start(ctx context.Context) error {
	cmd := exec.Command(m.args[0], m.args[1:]...)
	// Its own process group, killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	m.proc, m.done = cmd, make(chan struct{})
	done := m.done
	go func() {
		cmd.Wait()
		close(done)
	}()
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(m.dir, "mariadbd.log"))
			return fmt.Errorf("mariadbd exited during start:\n%s", tail(string(log), 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd does not take connections after 60s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kill ends the server at once, as a crash would: open transactions are
// lost, committed ones stay (crash recovery replays them at the next start).
func (m *MariaDB) kill() {
	if m.proc == nil {
		return
	}
	syscall.Kill(-m.proc.Process.Pid, syscall.SIGKILL)
	<-m.done
	m.proc = nil
}

// Restart kills the server and starts it again on the same data and port.
// down is how long it stays away.
func (m *MariaDB) Restart(ctx context.Context, down time.Duration) error {
	m.kill()
	time.Sleep(down)
	return m.start(ctx)
}

// Stop kills the server and removes its directory.
func (m *MariaDB) Stop() {
	m.kill()
	os.RemoveAll(m.dir)
}
