package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/ent"
	// Registers the schema hooks (the change feed), defaults and validators.
	_ "github.com/deploysync/deploysync/ent/runtime"
)

// DB is ctrld's database: the Ent client for state, with every schema hook
// registered, and the same pool for the few statements Ent cannot express
// (the stream's filler inserts, retention deletes, advisory locks).
type DB struct {
	Ent *ent.Client
	SQL *sql.DB
}

// Close closes the pool.
func (db *DB) Close() error { return db.Ent.Close() }

// Open connects to MySQL/MariaDB at dsn (go-sql-driver syntax, e.g.
// "user:pass@tcp(127.0.0.1:3306)/deploysync"). Times are read and written
// as UTC, and the session's time zone is UTC.
func Open(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database DSN: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("database DSN names no database (want user:pass@tcp(host:port)/DBNAME)")
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// The session speaks UTC too, so NOW() in SQL (the filler's gap rows)
	// and the times Ent writes agree whatever the server's time zone.
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(16)
	db.SetConnMaxLifetime(30 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database at %s: %w", cfg.Addr, err)
	}
	return &DB{Ent: ent.NewClient(ent.Driver(entsql.OpenDB("mysql", db))), SQL: db}, nil
}

// Migrate brings the schema up to date (Ent auto-migration: creates and
// extends tables and indexes, never drops).
func Migrate(ctx context.Context, client *ent.Client) error {
	if err := client.Schema.Create(ctx); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	return nil
}

// WithTx runs fn in a transaction and commits it when fn returns nil;
// otherwise (or on panic) it rolls back and nothing fn wrote remains.
//
// A transaction the database rolled back to break a deadlock is run again,
// up to deadlockAttempts times in all: the change feed's locking reads make
// such deadlocks a normal outcome of concurrent writers (a child insert and
// its parent's delete taking the parent's lock in opposite orders), and the
// caller's operation did nothing yet. fn must therefore be safe to run again
// (it only writes through tx).
func WithTx(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := withTxOnce(ctx, client, fn)
		if !IsDeadlock(err) || attempt == deadlockAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// deadlockAttempts bounds WithTx's runs of one transaction.
const deadlockAttempts = 4

// IsDeadlock reports whether err is the database's "deadlock found; the
// transaction was rolled back" (MySQL/MariaDB error 1213).
func IsDeadlock(err error) bool {
	var merr *mysql.MySQLError
	return errors.As(err, &merr) && merr.Number == 1213
}

func withTxOnce(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) (err error) {
	tx, err := client.Tx(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			return fmt.Errorf("%w (rollback: %v)", err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
