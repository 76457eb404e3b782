package main

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testproc"
)

// stateMarker marks a state directory as devstack's, so that down never
// deletes a directory a user passed by mistake.
const stateMarker = ".devstack"

// databaseFile names the database up created, for down to drop.
func databaseFile() string { return filepath.Join(stateDir, "database") }

// tmpDir is where the stack's control planes keep their data (up points
// TMPDIR there), so that none of it outlives the state directory.
func tmpDir() string { return filepath.Join(stateDir, "tmp") }

// down stops whatever a previous up left running (devstack itself, the
// console, the daemons, the control planes), deletes the kind clusters it
// created, drops its database and removes the state directory, saying
// what it stopped and removed. Run twice, the second says there was
// nothing to clean.
func down() error {
	entries, err := os.ReadDir(stateDir)
	if os.IsNotExist(err) || (err == nil && len(entries) == 0) {
		say("nothing to clean (no %s)", stateDir)
		return nil
	}
	if _, err := os.Stat(filepath.Join(stateDir, stateMarker)); err != nil {
		return fmt.Errorf("%s exists but was not made by devstack (no %s in it); refusing to delete it: pass a new --dir (or delete it yourself if it is an old stack's)", stateDir, stateMarker)
	}
	for _, c := range stopComponents(recordedAll()) {
		say("stopped %s (pid %d)", c.Name, c.PID)
	}
	stopControlPlanes()
	deleteRecordedKindClusters()
	dropRecordedDatabase()
	size := du(stateDir)
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	say("removed %s (%s: logs, tokens, kubeconfigs, binaries)", stateDir, megabytes(size))
	return nil
}

// stopControlPlanes kills the processes of each local control plane and
// each region's Prometheus under tmpDir and removes their data (etcd's
// alone is tens of megabytes).
func stopControlPlanes() {
	dirs, _ := filepath.Glob(filepath.Join(tmpDir(), filepath.Base(testproc.Root()), "*"))
	for _, dir := range dirs {
		what, data := "control plane", "control-plane data"
		if strings.HasPrefix(filepath.Base(dir), "prometheus-") { // internal/promtest's
			what, data = "Prometheus", "Prometheus data"
		}
		for _, pid := range testproc.Recorded(dir) {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			syscall.Kill(-pid, syscall.SIGKILL)
			say("stopped %s (pid %d) of %s %s", strings.TrimSpace(string(comm)), pid, what, filepath.Base(dir))
		}
		size := du(dir)
		if err := os.RemoveAll(dir); err != nil {
			say("could not remove %s %s: %v", data, dir, err)
			continue
		}
		say("removed %s %s (%s)", data, dir, megabytes(size))
	}
}

// dropRecordedDatabase drops the database up created. Failing to is
// reported, not fatal: the rest of the cleanup still matters.
func dropRecordedDatabase() {
	data, err := os.ReadFile(databaseFile())
	if err != nil {
		return
	}
	name := strings.TrimSpace(string(data))
	dropped, err := dropDatabase(context.Background(), name)
	switch {
	case err != nil:
		say("could not drop database %s (%v); drop it yourself: mariadb -e 'DROP DATABASE %s'", name, err, name)
	case dropped:
		say("dropped database %s", name)
	}
}

// dropDatabase drops name if it exists and says whether it did.
func dropDatabase(ctx context.Context, name string) (bool, error) {
	admin, err := adminDB()
	if err != nil {
		return false, err
	}
	defer admin.Close()
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
		return false, err
	}
	if n == 0 {
		return false, nil
	}
	_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name))
	return err == nil, err
}

// adminDB connects to the MariaDB server the stack uses, on no database.
func adminDB() (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(testdb.DefaultDSN)
	if err != nil {
		return nil, err
	}
	return sql.Open("mysql", cfg.FormatDSN())
}

func quoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// du is the size of the files under dir.
func du(dir string) int64 {
	var size int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	return size
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
