package convergecheck

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/ci"
	"github.com/deploysync/deploysync/internal/testrec"
)

// ownMariaDB starts the checker's own MariaDB until t ends. Without the
// server binaries it fails the test in CI, so CI never passes without the
// MariaDB restart fault, and elsewhere returns nil, having said why.
func ownMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	m, err := StartMariaDB(context.Background())
	switch {
	case errors.Is(err, ErrNoMariaDB):
		if ci.Running() {
			t.Fatal(err)
		}
		t.Logf("%v (going without it outside CI)", err)
		return nil
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// The checker's own MariaDB keeps committed data across the restart its
// fault does, and takes connections again afterwards.
func TestOwnMariaDBRestartKeepsCommittedData(t *testing.T) {
	if testing.Short() {
		t.Skip("convergecheck: starts a MariaDB server; skipped in -short mode")
	}
	ctx := context.Background()
	m := ownMariaDB(t)
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
func TestOwnMariaDBRestartEndsWithItsContextAndAfterStop(t *testing.T) {
	if testing.Short() {
		t.Skip("convergecheck: starts a MariaDB server; skipped in -short mode")
	}
	m := ownMariaDB(t)
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
	if err := m.Restart(context.Background(), 0); !errors.Is(err, ErrMariaDBStopped) {
		t.Fatalf("a restart after Stop: %v, want ErrMariaDBStopped", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		t.Fatalf("a restart after Stop left mariadbd running (pid %d)", m.proc.Pid())
	}
}

// Without mariadbd the checker's tests fail in CI, naming how to install
// it, and go on without it only outside CI.
func TestMissingMariaDBFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dirs := mariadbDirs
	mariadbDirs = nil
	t.Cleanup(func() { mariadbDirs = dirs })
	for _, ciValue := range []string{"true", "false"} {
		t.Setenv("CI", ciValue)
		var got *MariaDB
		r := testrec.Run(t, func(tb testing.TB) { got = ownMariaDB(tb) })
		switch {
		case ciValue == "true" && !strings.Contains(r.Failed, "ensure-mariadb.sh"):
			t.Errorf("CI=true: want a failure naming scripts/ensure-mariadb.sh, got failed=%q skipped=%q", r.Failed, r.Skipped)
		case ciValue == "false" && (r.Failed != "" || r.Skipped != "" || got != nil):
			t.Errorf("CI=false: want no server and the test going on, got failed=%q skipped=%q server %v", r.Failed, r.Skipped, got)
		}
	}
}
