package retention

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
)

// lockName is the advisory lock that makes one replica the cleaner. Such
// locks are server-wide, so the name carries the database's, hashed to fit
// the 64 characters a lock name may have: the ctrlds of another database
// on the same server (another deployment, a test running alongside) clean
// their own.
const lockName = "CONCAT('deploysync.retention.', SHA1(DATABASE()))"

// BatchSize is how many rows one DELETE removes.
const BatchSize = 10000

// Config tunes retention.
type Config struct {
	// TTL is how long change rows are kept (default 24h).
	TTL time.Duration
	// MaxAge is the longest rows are kept for a lagging agent (default 7 days).
	MaxAge time.Duration
	// Interval between runs (default 5m).
	Interval time.Duration
	// AgentWindow: agents heard from within it hold rows (default 10m).
	AgentWindow time.Duration
	// AgentTTL: an agent record nothing was heard of for this long is
	// deleted (default 72h: a weekend's outage stays on the console; at
	// least AgentWindow, so no record that holds rows goes).
	AgentTTL time.Duration
	// RevisionsKept is how many of a deployment's newest revisions are
	// kept (default 100): its history and what a rollback can restore.
	RevisionsKept int
	// AuditTTL is how long operator_audit_log rows are kept (default 400
	// days: audits commonly look back over a year, e.g. a SOC 2 type II
	// period or PCI DSS's year of audit trail, and the month more leaves
	// time to export a year that ended before it is gone).
	AuditTTL time.Duration
	// EvaluationsTTL is how long the check evaluations of a rollout that
	// ended are kept (default 24h: its page shows the values it ended
	// on); those of a rollout gone with its deployment go at once.
	EvaluationsTTL time.Duration
}

// Defaults are the production settings zero Config fields take (ctrld's
// flags show them).
var Defaults = Config{TTL: 24 * time.Hour, MaxAge: 7 * 24 * time.Hour, Interval: 5 * time.Minute, AgentWindow: 10 * time.Minute, AgentTTL: 72 * time.Hour, RevisionsKept: 100,
	AuditTTL: 400 * 24 * time.Hour, EvaluationsTTL: 24 * time.Hour}

func (c *Config) defaults() {
	if c.TTL <= 0 {
		c.TTL = Defaults.TTL
	}
	if c.MaxAge < c.TTL {
		c.MaxAge = max(Defaults.MaxAge, c.TTL)
	}
	if c.Interval <= 0 {
		c.Interval = Defaults.Interval
	}
	if c.AgentWindow <= 0 {
		c.AgentWindow = Defaults.AgentWindow
	}
	if c.AgentTTL <= 0 {
		c.AgentTTL = Defaults.AgentTTL
	}
	c.AgentTTL = max(c.AgentTTL, c.AgentWindow)
	if c.RevisionsKept <= 0 {
		c.RevisionsKept = Defaults.RevisionsKept
	}
	if c.AuditTTL <= 0 {
		c.AuditTTL = Defaults.AuditTTL
	}
	if c.EvaluationsTTL <= 0 {
		c.EvaluationsTTL = Defaults.EvaluationsTTL
	}
}

// Cleaner runs retention.
type Cleaner struct {
	db      *sql.DB
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
}

// New returns a Cleaner.
func New(db *sql.DB, cfg Config, log *slog.Logger, m *metrics.Metrics) *Cleaner {
	cfg.defaults()
	return &Cleaner{db: db, cfg: cfg, log: log, metrics: m, now: time.Now}
}

// Run cleans every Interval until ctx ends.
func (c *Cleaner) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("retention: run failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RunOnce deletes what is due if this replica gets the lock: stale agent
// records, then old change rows. It returns the number of change rows
// deleted (0 and no error when another replica holds the lock).
func (c *Cleaner) RunOnce(ctx context.Context) (int64, error) {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lockName+", 0)").Scan(&got); err != nil {
		c.metrics.CleanupRuns.WithLabelValues("error").Inc()
		return 0, fmt.Errorf("take the retention lock: %w", err)
	}
	if got.Int64 != 1 {
		c.metrics.CleanupRuns.WithLabelValues("locked").Inc()
		return 0, nil
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK("+lockName+")")

	if err := c.pruneAgents(ctx, conn); err != nil {
		c.metrics.CleanupRuns.WithLabelValues("error").Inc()
		return 0, err
	}
	// Tidying up is best effort: what fails now is tried again next run,
	// and must not hold up the deletion of old change rows (I5).
	if err := c.tidy(ctx, conn); err != nil {
		c.metrics.CleanupRuns.WithLabelValues("tidy_error").Inc() // the run goes on, and ends once more
		c.log.Warn("retention: tidying up failed; trying again next run", "err", err)
	}
	upTo, err := c.deletableUpTo(ctx, conn)
	if err != nil || upTo == 0 {
		if err != nil {
			c.metrics.CleanupRuns.WithLabelValues("error").Inc()
		}
		return 0, err
	}
	if err := changelog.RaiseMark(ctx, c.db, changelog.MarkCleanupFloor, upTo); err != nil {
		c.metrics.CleanupRuns.WithLabelValues("error").Inc()
		return 0, err
	}
	var total int64
	for {
		n, err := changelog.DeletePrefix(ctx, conn, upTo, BatchSize)
		if err != nil {
			c.metrics.CleanupRuns.WithLabelValues("error").Inc()
			return total, err
		}
		total += n
		c.metrics.CleanupRows.Add(float64(n))
		if n < BatchSize {
			break
		}
	}
	c.metrics.CleanupRuns.WithLabelValues("done").Inc()
	if total > 0 {
		c.log.Info("retention: deleted old changes", "rows", total, "up_to", upTo)
	}
	return total, nil
}

// pruneAgents deletes the agent records nothing was heard of for AgentTTL,
// in batches. updated_at moves with every write through Ent (a heartbeat,
// a stream's connect and disconnect); the heartbeat and connection times
// are checked too, so a write that bypassed Ent cannot make a live agent
// look stale.
func (c *Cleaner) pruneAgents(ctx context.Context, conn *sql.Conn) error {
	cutoff := c.now().UTC().Add(-c.cfg.AgentTTL)
	var total int64
	for {
		res, err := conn.ExecContext(ctx, `DELETE FROM agents WHERE updated_at < ?
			AND (last_heartbeat IS NULL OR last_heartbeat < ?)
			AND (connected_since IS NULL OR connected_since < ?) LIMIT ?`,
			cutoff, cutoff, cutoff, BatchSize)
		if err != nil {
			return fmt.Errorf("delete stale agent records: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		c.metrics.AgentsPruned.Add(float64(n))
		if n < BatchSize {
			break
		}
	}
	if total > 0 {
		c.log.Info("retention: deleted stale agent records", "records", total, "silent_for", c.cfg.AgentTTL)
	}
	return nil
}

// deletableUpTo is the highest pk that may go: older than the TTL, not
// above a recently-heard agent's acked cursor unless older than MaxAge, and
// never above the safe watermark.
func (c *Cleaner) deletableUpTo(ctx context.Context, conn *sql.Conn) (uint64, error) {
	now := c.now().UTC()
	upTo, err := changelog.NewestBefore(ctx, conn, now.Add(-c.cfg.TTL))
	if err != nil || upTo == 0 {
		return 0, err
	}
	// Unsigned, like the column: a signed scan fails on a cursor at or
	// above 2^63, and retention would stop for as long as one is stored.
	var minAcked sql.Null[uint64]
	err = conn.QueryRowContext(ctx, "SELECT MIN(acked_cursor) FROM agents WHERE last_heartbeat > ?", now.Add(-c.cfg.AgentWindow)).Scan(&minAcked)
	if err != nil {
		return 0, err
	}
	if minAcked.Valid && minAcked.V < upTo {
		hard, err := changelog.NewestBefore(ctx, conn, now.Add(-c.cfg.MaxAge))
		if err != nil {
			return 0, err
		}
		upTo = max(minAcked.V, hard)
	}
	w, err := changelog.ReadMark(ctx, c.db, changelog.MarkSafeWatermark)
	if err != nil {
		return 0, err
	}
	return min(upTo, w), nil
}
