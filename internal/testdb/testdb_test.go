package testdb_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testrec"
)

// The helper gives each test its own database, usable for real SQL, and
// drops it when the test ends.
func TestNewCreatesIsolatedDatabaseAndDropsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("testdb: needs MySQL/MariaDB; skipped in -short mode")
	}
	var first, second *testdb.Database
	t.Run("first", func(t *testing.T) {
		first = testdb.New(t)
		db := open(t, first.DSN)
		if _, err := db.Exec("CREATE TABLE t (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO t () VALUES ()"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second", func(t *testing.T) {
		second = testdb.New(t)
		db := open(t, second.DSN)
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("fresh database %s has %d tables, want 0", second.Name, n)
		}
	})
	if first == nil || second == nil || first.Name == second.Name {
		t.Fatalf("want two distinct databases, got %v and %v", first, second)
	}

	// Both subtests ended, so both databases must be gone.
	db, drop, err := testdb.Create(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	conn := open(t, db.DSN)
	for _, name := range []string{first.Name, second.Name} {
		var n int
		if err := conn.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// An unreachable database fails the test in CI, naming the fix, and only
// skips outside CI.
func TestUnreachableDatabaseFailsInCI(t *testing.T) {
	t.Setenv(testdb.EnvDSN, "nobody:nothing@tcp(127.0.0.1:1)/")
	_, _, err := testdb.Create(context.Background())
	if err == nil {
		t.Fatal("a server on port 1 answered")
	}
	for _, ci := range []string{"true", "false"} {
		t.Setenv("CI", ci)
		r := testrec.Run(t, func(tb testing.TB) { testdb.Unavailable(tb, err) })
		msg := r.Failed + r.Skipped
		if !strings.Contains(msg, "scripts/ensure-mariadb.sh") || !strings.Contains(msg, testdb.EnvDSN) {
			t.Errorf("CI=%s: message %q does not say how to fix it", ci, msg)
		}
		if (ci == "true") != (r.Failed != "") || (ci == "false") != (r.Skipped != "") {
			t.Errorf("CI=%s: failed=%q skipped=%q", ci, r.Failed, r.Skipped)
		}
	}
}
