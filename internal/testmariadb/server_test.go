package testmariadb

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/testrec"
)

// A server of a test's own keeps committed data across a restart, and
// takes connections again afterwards.
func TestServerRestartKeepsCommittedData(t *testing.T) {
	if testing.Short() {
		t.Skip("testmariadb: starts a MariaDB server; skipped in -short mode")
	}
	ctx := context.Background()
	m := Own(t)
	if m == nil {
		t.Skip("no mariadbd")
	}
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"CREATE DATABASE t", "CREATE TABLE t.x (n INT)", "INSERT INTO t.x VALUES (42)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	start := time.Now()
	if err := m.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %s", time.Since(start).Round(time.Millisecond))
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM t.x").Scan(&n); err != nil || n != 42 {
		t.Fatalf("after the restart: n=%d, err %v", n, err)
	}
}

// A restart fault still under way when its test ends must not outlive it:
// the restart's time down ends with its context, and after Stop nothing
// starts again.
func TestServerRestartEndsWithItsContextAndAfterStop(t *testing.T) {
	if testing.Short() {
		t.Skip("testmariadb: starts a MariaDB server; skipped in -short mode")
	}
	m := Own(t)
	if m == nil {
		t.Skip("no mariadbd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := m.Restart(ctx, time.Minute)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("a restart down for a minute, its context ending after 200ms: %v after %s", err, took.Round(time.Millisecond))
	}
	m.Stop()
	if err := m.Restart(context.Background(), 0); !errors.Is(err, ErrStopped) {
		t.Fatalf("a restart after Stop: %v, want ErrStopped", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		t.Fatalf("a restart after Stop left mariadbd running (pid %d)", m.proc.Pid())
	}
}

// Without mariadbd the tests that need a server of their own fail in CI, naming how to install
// it, and go on without it only outside CI.
func TestMissingMariaDBFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dirs := mariadbDirs
	mariadbDirs = nil
	t.Cleanup(func() { mariadbDirs = dirs })
	for _, ciValue := range []string{"true", "false"} {
		t.Setenv("CI", ciValue)
		var got *Server
		r := testrec.Run(t, func(tb testing.TB) { got = Own(tb) })
		switch {
		case ciValue == "true" && !strings.Contains(r.Failed, "ensure-mariadb.sh"):
			t.Errorf("CI=true: want a failure naming scripts/ensure-mariadb.sh, got failed=%q skipped=%q", r.Failed, r.Skipped)
		case ciValue == "false" && (r.Failed != "" || r.Skipped != "" || got != nil):
			t.Errorf("CI=false: want no server and the test going on, got failed=%q skipped=%q server %v", r.Failed, r.Skipped, got)
		}
	}
}
