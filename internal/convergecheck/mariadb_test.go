package convergecheck

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

// The checker's own MariaDB keeps committed data across the restart its
// fault does, and takes connections again afterwards.
func TestOwnMariaDBRestartKeepsCommittedData(t *testing.T) {
	ctx := context.Background()
	m, err := StartMariaDB(ctx)
	if errors.Is(err, ErrNoMariaDB) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
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
