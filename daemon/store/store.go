package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/daemon/viewhash"
	"github.com/deploysync/deploysync/ent"
	// Registers the schema hooks (the change feed), defaults and validators.
	_ "github.com/deploysync/deploysync/ent/runtime"
	"github.com/deploysync/deploysync/internal/naming"
)

// DB is ctrld's database: the Ent client for state, with every schema hook
// registered, and the same pool for the few statements Ent cannot express
// (retention deletes, advisory locks); a second, smaller pool on the same
// database for the watch streams alone; and a third, of a few connections,
// for the tailer alone.
//
// The split keeps invariant I8: unary calls always keep capacity of their
// own. Streams are many and long-lived; however many there are and however
// they behave, they queue for StreamConns connections and never for the
// MainConns that operator calls, status reports, token checks, retention
// and the workflow share. And the tailer, which every stream waits on,
// never queues behind any of them: a poll that waited seconds for a
// connection would look like a database that hangs, and end every stream
// of a replica whose database answers.
type DB struct {
	Ent *ent.Client
	SQL *sql.DB
	// StreamEnt and StreamSQL are the watch streams' pool.
	StreamEnt *ent.Client
	StreamSQL *sql.DB
	// TailerSQL is the tailer's pool (daemon/tailer).
	TailerSQL *sql.DB
	// Galera says the database is a node of a Galera cluster, where every
	// connection's reads wait until the node has applied what the cluster
	// committed before them (see Open).
	Galera bool
}

// Pool sizes: together the 64 connections ctrld has always opened at most.
const (
	// MainConns bounds the pool of everything but the streams and the
	// tailer.
	MainConns = 45
	// StreamConns bounds the streams' pool: a stream uses a connection
	// only for one short read or write at a time (a full sync page, the
	// state of a batch of changes, its connection record), never while it
	// waits on its client.
	StreamConns = 16
	// TailerConns bounds the tailer's pool, all kept open: its loop's one
	// statement at a time (a poll, a region read, the watermark's write),
	// the filler's run beside it, and a region read an operator's pause
	// asks for.
	TailerConns = 3
)

// Close closes the pools.
func (db *DB) Close() error {
	return errors.Join(db.Ent.Close(), db.StreamEnt.Close(), db.TailerSQL.Close())
}

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
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	galera, err := isGaleraNode(connectCtx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database at %s: %w", cfg.Addr, err)
	}
	if galera {
		// A Galera node applies the other nodes' commits a little after
		// they happen. Without this, a read could miss a change committed
		// through another node that the reader already knows of: a
		// replica poked by a peer after its commit would poll too early,
		// an operator's write through one replica would not yet show
		// through another, an agent resuming on another replica from a
		// cursor it got elsewhere could be ahead of what its node shows.
		// With it each read (and each transaction's first read) first
		// waits until the node has applied everything the cluster had
		// committed, the causal reads one server gives by itself.
		cfg.Params["wsrep_sync_wait"] = "1"
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := openPool(connector, MainConns, poolIdleTime)
	if err := db.PingContext(connectCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database at %s: %w", cfg.Addr, err)
	}
	streams := openPool(connector, StreamConns, poolIdleTime)
	return &DB{
		Ent: entClient(db), SQL: db,
		StreamEnt: entClient(streams), StreamSQL: streams,
		TailerSQL: openPool(connector, TailerConns, 0),
		Galera:    galera,
	}, nil
}

// isGaleraNode reports whether cfg reaches a node of a Galera cluster
// (wsrep_on is ON); MySQL, which has no such variable, and a MariaDB
// server without a cluster are not.
func isGaleraNode(ctx context.Context, cfg *mysql.Config) (bool, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return false, err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return false, err
	}
	var on bool
	err = db.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on)
	var merr *mysql.MySQLError
	if errors.As(err, &merr) && merr.Number == 1193 { // unknown system variable
		return false, nil
	}
	return on, err
}

// poolIdleTime is how long the main and stream pools keep a connection
// nobody uses.
const poolIdleTime = time.Minute

// openPool opens a pool of at most size connections through connector,
// closing one unused for idleTime (0: keeping them all open).
//
// A connection a call puts back is kept, however many the pool holds:
// capping the idle ones below size would close a connection each time a
// burst (a thousand agents reconnecting after a restart) hands one back,
// and open another for the next call, a TCP connect, a login and two SETs
// each, more than the statements the burst came for. After a quiet
// minute the burst's connections close.
func openPool(connector driver.Connector, size int, idleTime time.Duration) *sql.DB {
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	db.SetConnMaxIdleTime(idleTime)
	db.SetConnMaxLifetime(30 * time.Minute)
	return db
}

func entClient(db *sql.DB) *ent.Client {
	return ent.NewClient(ent.Driver(entsql.OpenDB("mysql", db)))
}

// Migrate brings the schema up to date (Ent auto-migration: creates and
// extends tables and indexes, never drops), then fills the columns added
// since with what older versions wrote, and makes the installation's
// secrets it has none of yet.
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
	// Tokens from before api_tokens.public_id existed get theirs, derived
	// from their hash as new tokens' are (daemon/auth.TokenID), so a token
	// has the same ID whichever ctrld issued it. IGNORE: should two old
	// hashes give one ID (one chance in 2^48 per pair), one keeps none
	// and stays revocable by name.
	_, err = client.ExecContext(ctx, "UPDATE IGNORE api_tokens SET public_id = CONCAT('tok_', LEFT(SHA2(hash, 256), 12)) "+
		"WHERE public_id IS NULL")
	if err != nil {
		return fmt.Errorf("migrate api_tokens.public_id: %w", err)
	}
	if err := fillTopologyNamespaces(ctx, client); err != nil {
		return err
	}
	// The installation's secret that keys the hashes operators are shown,
	// made once per database (daemon/viewhash).
	return viewhash.Ensure(ctx, client)
}

// fillTopologyNamespaces gives the topologies from before
// deployment_topology.namespace existed their deployment's namespace, one
// statement per workspace's environment. No change rows: what agents are
// sent is the same (full syncs took the deployment's namespace for them).
func fillTopologyNamespaces(ctx context.Context, client *ent.Client) error {
	rows, err := client.QueryContext(ctx, "SELECT DISTINCT d.workspace_id, d.environment_id "+
		"FROM deployment_topology t JOIN deployments d ON d.id = t.deployment_id WHERE t.namespace = ''")
	if err != nil {
		return fmt.Errorf("migrate deployment_topology.namespace: %w", err)
	}
	var pairs [][2]string
	for rows.Next() {
		var p [2]string
		if err := rows.Scan(&p[0], &p[1]); err != nil {
			rows.Close()
			return fmt.Errorf("migrate deployment_topology.namespace: %w", err)
		}
		pairs = append(pairs, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate deployment_topology.namespace: %w", err)
	}
	for _, p := range pairs {
		_, err := client.ExecContext(ctx, "UPDATE deployment_topology t JOIN deployments d ON d.id = t.deployment_id "+
			"SET t.namespace = ? WHERE t.namespace = '' AND d.workspace_id = ? AND d.environment_id = ?",
			naming.Namespace(p[0], p[1]), p[0], p[1])
		if err != nil {
			return fmt.Errorf("migrate deployment_topology.namespace of %s/%s: %w", p[0], p[1], err)
		}
	}
	return nil
}

// WithTx runs fn in a transaction and commits it when fn returns nil;
// otherwise (or on panic) it rolls back and nothing fn wrote remains.
//
// A transaction the database rolled back for colliding with another
// (IsConflict) is run again, up to conflictAttempts times in all: the
// change feed's locking reads make deadlocks a normal outcome of
// concurrent writers (a child insert and its parent's delete taking the
// parent's lock in opposite orders), and on a Galera cluster two nodes'
// transactions that wrote the same rows fail certification the same way;
// either way the caller's operation did nothing yet. fn must therefore be
// safe to run again (it only writes through tx). Before each rerun it
// waits a short random time that grows with each attempt
// (conflictBackoff): writers that collided together would otherwise start
// again together and collide the same way. A conflict that outlasts every
// run is returned as such (IsConflict): the caller may retry.
func WithTx(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) error {
	return RetryConflict(ctx, func() error { return withTxOnce(ctx, client, fn) })
}

// RetryConflict runs fn, a transaction or a statement that is one, again
// while the database rolls it back for a conflict (IsConflict): up to
// conflictAttempts runs in all, each after a short random wait
// (conflictBackoff). fn must be safe to run again.
func RetryConflict(ctx context.Context, fn func() error) error {
	lockWaits := 0
	for attempt := 1; ; attempt++ {
		err := fn()
		if !IsConflict(err) || attempt == conflictAttempts || ctx.Err() != nil {
			return err
		}
		// A lock wait that timed out is rerun once: each took
		// innodb_lock_wait_timeout (50 s by default; on a Galera node a
		// causal read that timed out is one too), and a lock held that
		// long is not a collision the next run would escape. Eight of
		// them would hold a connection for minutes.
		if isLockWaitTimeout(err) {
			if lockWaits++; lockWaits > 1 {
				return err
			}
		}
		conflictReruns.Add(1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(conflictBackoff(attempt)):
		}
	}
}

// conflictReruns counts the reruns RetryConflict made, in this process.
var conflictReruns atomic.Uint64

// ConflictReruns is how many times, in this process, a transaction or
// statement ran again after colliding with another (ctrld exports it as
// deploysync_database_conflict_reruns_total): how hard writers contend, on a
// Galera cluster across nodes.
func ConflictReruns() uint64 { return conflictReruns.Load() }

// conflictAttempts bounds the runs of one transaction (a lock wait timeout
// is rerun once at most). Eight: on one
// server a deadlock is rare enough that four always sufficed, but on a
// Galera cluster a hot row written through several nodes at once fails
// certification for all but one writer each round, and four runs left a
// few of every hundred contended writes failed (the Galera change-feed
// check); the waits below keep the worst case near half a second.
const conflictAttempts = 8

// conflictBackoff is the wait before rerunning a transaction that collided
// on its attempt'th run: random up to 4 ms doubled with each attempt (at
// most 250 ms), so the victims of one collision spread out, and spread
// wider each time they meet again. The seven waits add up to at most about
// 0.5 s, and to a few milliseconds for the usual single rerun.
func conflictBackoff(attempt int) time.Duration {
	return rand.N(min(4*time.Millisecond<<(attempt-1), 250*time.Millisecond))
}

// ErrConflict is what a transaction returns (wrapped) when it finds itself
// racing another that it expected its locks to keep out, e.g. a unique
// key taken by a concurrent writer on another Galera node, where row locks
// do not reach: WithTx runs it again, as after a deadlock.
var ErrConflict = errors.New("collided with a concurrent transaction")

// IsConflict reports whether err is a transaction colliding with another,
// so that running it again can succeed: ErrConflict; a deadlock, or on a
// Galera cluster a certification conflict with another node's transaction
// (both MySQL/MariaDB error 1213); or a lock wait that timed out (1205; the
// statement failed, and WithTx rolls the whole transaction back before it
// runs again).
func IsConflict(err error) bool {
	var merr *mysql.MySQLError
	return errors.Is(err, ErrConflict) || errors.As(err, &merr) && merr.Number == 1213 || isLockWaitTimeout(err)
}

// isLockWaitTimeout reports whether err is "lock wait timeout exceeded"
// (1205).
func isLockWaitTimeout(err error) bool {
	var merr *mysql.MySQLError
	return errors.As(err, &merr) && merr.Number == 1205
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
