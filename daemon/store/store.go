package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/ent"
	// Registers the schema hooks (the change feed), defaults and validators.
	_ "github.com/deploysync/deploysync/ent/runtime"
)

// DB is ctrld's database: the Ent client for state, with every schema hook
// registered, and the same pool for the few statements Ent cannot express
// (the tailer's filler inserts, retention deletes, advisory locks); and a
// second, smaller pool on the same database for the watch streams alone.
//
// The split keeps invariant I8: unary calls always keep capacity of their
// own. Streams are many and long-lived; however many there are and however
// they behave, they queue for StreamConns connections and never for the
// MainConns that operator calls, status reports, token checks, the tailer,
// retention and the workflow share.
type DB struct {
	Ent *ent.Client
	SQL *sql.DB
	// StreamEnt and StreamSQL are the watch streams' pool.
	StreamEnt *ent.Client
	StreamSQL *sql.DB
}

// Pool sizes: together the 64 connections ctrld has always opened at most.
const (
	// MainConns bounds the pool of everything but the streams.
	MainConns = 48
	// StreamConns bounds the streams' pool: a stream uses a connection
	// only for one short read or write at a time (a full sync page, the
	// state of a batch of changes, its connection record), never while it
	// waits on its client.
	StreamConns = 16
)

// Close closes both pools.
func (db *DB) Close() error { return errors.Join(db.Ent.Close(), db.StreamEnt.Close()) }

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
	// One round trip per statement: the driver puts the arguments into
	// the statement text itself (escaped for the connection's character
	// set, utf8mb4 below, and its sql_mode) instead of preparing it on the server,
	// executing it and closing it, two round trips and a server-side
	// statement each time, since database/sql keeps no prepared statements
	// between calls. The statements are the same either way; only how
	// their arguments travel changes.
	cfg.InterpolateParams = true
	// Escaping in the statement text is only safe in a character set where
	// no multibyte character can end in a backslash (in GBK, Big5 or SJIS
	// an agent's "中'" would close the string literal). Every connection
	// says SET NAMES utf8mb4 itself, whatever the DSN's charset or the
	// server's default (skip-character-set-client-handshake included):
	// deploysync's tables are utf8mb4, and its text is UTF-8.
	if err := cfg.Apply(mysql.Charset("utf8mb4", "utf8mb4_general_ci")); err != nil {
		return nil, fmt.Errorf("database DSN: %w", err)
	}
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
	db := openPool(connector, MainConns)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database at %s: %w", cfg.Addr, err)
	}
	streams := openPool(connector, StreamConns)
	return &DB{
		Ent: entClient(db), SQL: db,
		StreamEnt: entClient(streams), StreamSQL: streams,
	}, nil
}

// openPool opens a pool of at most size connections through connector.
func openPool(connector driver.Connector, size int) *sql.DB {
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size / 3)
	db.SetConnMaxLifetime(30 * time.Minute)
	return db
}

func entClient(db *sql.DB) *ent.Client {
	return ent.NewClient(ent.Driver(entsql.OpenDB("mysql", db)))
}

// Migrate brings the schema up to date (Ent auto-migration: creates and
// extends tables and indexes, never drops), then fills the columns added
// since with what older versions wrote.
func Migrate(ctx context.Context, client *ent.Client) error {
	if err := client.Schema.Create(ctx); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	// Live operator tokens from before api_tokens.live_operator_name
	// existed take their names, so new tokens cannot reuse them. IGNORE:
	// where older versions let two live tokens share a name, one takes it
	// (the name stays taken) and the other is left as it was.
	_, err := client.ExecContext(ctx, "UPDATE IGNORE api_tokens SET live_operator_name = name "+
		"WHERE kind = 'operator' AND revoked_at IS NULL AND live_operator_name IS NULL")
	if err != nil {
		return fmt.Errorf("migrate api_tokens.live_operator_name: %w", err)
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
// (it only writes through tx). Before each rerun it waits a short random
// time (deadlockBackoff): a burst of writers that deadlocked together would
// otherwise start again together and collide the same way. A deadlock that
// outlasts every run is returned as such (IsDeadlock): the caller may retry.
func WithTx(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) error {
	return RetryDeadlock(ctx, func() error { return withTxOnce(ctx, client, fn) })
}

// RetryDeadlock runs fn, a transaction or a statement that is one, again
// while the database rolls it back to break a deadlock: up to
// deadlockAttempts runs in all, each after a short random wait
// (deadlockBackoff). fn must be safe to run again.
func RetryDeadlock(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if !IsDeadlock(err) || attempt == deadlockAttempts || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(deadlockBackoff(attempt)):
		}
	}
}

// deadlockAttempts bounds WithTx's runs of one transaction.
const deadlockAttempts = 4

// deadlockBackoff is the wait before rerunning a transaction that
// deadlocked on its attempt'th run: random up to 5 ms times attempt, so the
// victims of one deadlock spread out, and spread wider each time they meet
// again. Our transactions last a few milliseconds; the worst case adds 30 ms
// over the three waits.
func deadlockBackoff(attempt int) time.Duration {
	return rand.N(time.Duration(attempt) * 5 * time.Millisecond)
}

// IsDeadlock reports whether err is the database's "deadlock found; the
// transaction was rolled back" (MySQL/MariaDB error 1213).
func IsDeadlock(err error) bool {
	var merr *mysql.MySQLError
	return errors.As(err, &merr) && merr.Number == 1213
}

func withTxOnce(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) (err error) {
	// REPEATABLE READ whatever the server's default (READ COMMITTED is a
	// common choice for MySQL replication): the change feed's locking reads
	// and the check-then-insert of unique names rely on its gap locks.
	tx, err := client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
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
