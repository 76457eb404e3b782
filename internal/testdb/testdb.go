package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/ci"
)

// EnvDSN names the environment variable holding the server DSN.
const EnvDSN = "DEPLOYSYNC_TEST_MYSQL_DSN"

// DefaultDSN matches the user scripts/ensure-mariadb.sh creates.
const DefaultDSN = "deploysync:deploysync@tcp(127.0.0.1:3306)/"

// namePrefix marks databases this package created, so stale ones left by a
// killed test run can be found and dropped.
const namePrefix = "dstest_"

// staleAfter is how old a leftover test database must be before another run
// drops it; no test in this repo runs anywhere near that long.
const staleAfter = 2 * time.Hour

// Database is one fresh database on the test server.
type Database struct {
	// Name is the database's name.
	Name string
	// DSN connects to this database (parseTime on, UTC).
	DSN string
}

// New creates a fresh database for t and drops it when t ends.
func New(t testing.TB) *Database {
	t.Helper()
	if testing.Short() {
		t.Skip("testdb: needs MySQL/MariaDB; skipped in -short mode")
	}
	db, drop, err := Create(context.Background())
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	return db
}

// Unavailable ends the test because the database cannot be used: a failure
// in CI, a skip with the reason elsewhere.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("testdb: MySQL/MariaDB not usable (%v); start it with scripts/ensure-mariadb.sh or set %s", err, EnvDSN)
	if ci.Running() {
		t.Fatal(msg)
	}
	t.Skip(msg + " (skipping outside CI)")
}

// Create makes a fresh database and returns it with a function that drops
// it. Use it from TestMain to share one database across a package.
func Create(ctx context.Context) (*Database, func() error, error) {
	base, err := serverConfig()
	if err != nil {
		return nil, nil, err
	}
	return create(ctx, base)
}

// CreateOn is Create on the server serverDSN reaches (a server of the
// test's own) instead of the shared test server.
func CreateOn(ctx context.Context, serverDSN string) (*Database, func() error, error) {
	base, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("parse server DSN: %w", err)
	}
	base.DBName = ""
	base.ParseTime = true
	base.Loc = time.UTC
	return create(ctx, base)
}

func create(ctx context.Context, base *mysql.Config) (*Database, func() error, error) {
	admin, err := sql.Open("mysql", base.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pingCtx); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("connect to %s: %w", base.Addr, err)
	}
	dropStale(ctx, admin)

	name := fmt.Sprintf("%s%d_%s", namePrefix, time.Now().Unix(), randomSuffix())
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, err)
	}
	cfg := base.Clone()
	cfg.DBName = name
	drop := func() error {
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return &Database{Name: name, DSN: cfg.FormatDSN()}, drop, nil
}

func serverConfig() (*mysql.Config, error) {
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		dsn = DefaultDSN
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", EnvDSN, err)
	}
	cfg.DBName = ""
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg, nil
}

// dropStale removes databases a killed test run left behind. Best effort: a
// failure here must not fail the test that happened to notice them.
func dropStale(ctx context.Context, admin *sql.DB) {
	rows, err := admin.QueryContext(ctx, "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE ?", namePrefix+"%")
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		created, err := strconv.ParseInt(strings.SplitN(strings.TrimPrefix(name, namePrefix), "_", 2)[0], 10, 64)
		if err == nil && time.Since(time.Unix(created, 0)) > staleAfter {
			stale = append(stale, name)
		}
	}
	rows.Close()
	for _, name := range stale {
		admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
