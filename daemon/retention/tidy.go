package retention

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/store"
)

// tidy deletes the stale sync rows (of resources gone or changed since), the
// revisions beyond each deployment's newest RevisionsKept, the audit
// records older than AuditTTL and the fleet halts lifted longer ago.
//
// Both find their rows with plain reads, which lock nothing, and delete
// them by key, so they hold no lock on the tables agents and operators
// write (a locking scan of resource_syncs deadlocked with agents'
// reports), and retry a deadlock that happens anyway.
func (c *Cleaner) tidy(ctx context.Context, conn *sql.Conn) error {
	return errors.Join(c.pruneStaleSyncs(ctx, conn), c.pruneRevisions(ctx, conn), c.pruneAuditLog(ctx, conn), c.pruneEvaluations(ctx, conn),
		c.pruneLiftedHalts(ctx, conn))
}

// pruneLiftedHalts deletes the fleet halts lifted more than AuditTTL ago:
// a halt is a record of an incident, kept as long as the audit log that
// has its making and lifting. A standing halt is never deleted, however
// old, and nothing reads a lifted one but the fleet's history (a lifted
// halt paused nothing any more: its resume moved what it had paused).
func (c *Cleaner) pruneLiftedHalts(ctx context.Context, conn *sql.Conn) error {
	cutoff := c.now().UTC().Add(-c.cfg.AuditTTL)
	total, err := deleteInBatches(ctx, conn, "DELETE FROM fleet_halts WHERE lifted_at < ? ORDER BY lifted_at LIMIT ?", cutoff)
	if err != nil {
		return fmt.Errorf("delete lifted fleet halts: %w", err)
	}
	if total > 0 {
		c.log.Info("retention: deleted fleet halts lifted long ago", "halts", total, "lifted_before", cutoff)
	}
	return nil
}

// deleteInBatches runs query, a DELETE ... LIMIT ? of rows older than
// cutoff, BatchSize rows at a time until fewer are left, and returns how
// many it deleted.
func deleteInBatches(ctx context.Context, conn *sql.Conn, query string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		res, err := conn.ExecContext(ctx, query, cutoff, BatchSize)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
		if n < BatchSize {
			return total, nil
		}
	}
}

// pruneEvaluations deletes the check evaluations of rollouts that ended
// more than EvaluationsTTL ago, or are gone, a rollout at a time in
// batches along the (rollout_id, ...) index. Nothing writes a finished
// rollout's evaluations (agents are assigned checks of progressing
// rollouts only), so the deletes contend with no one.
func (c *Cleaner) pruneEvaluations(ctx context.Context, conn *sql.Conn) error {
	cutoff := c.now().UTC().Add(-c.cfg.EvaluationsTTL)
	rows, err := conn.QueryContext(ctx, `SELECT DISTINCT e.rollout_id FROM check_evaluations e LEFT JOIN rollouts r ON r.id = e.rollout_id
		WHERE r.id IS NULL OR r.finished_at < ? LIMIT 1000`, cutoff)
	if err != nil {
		return fmt.Errorf("find old check evaluations: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("find old check evaluations: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find old check evaluations: %w", err)
	}
	var total int64
	for _, id := range ids {
		for {
			res, err := conn.ExecContext(ctx, "DELETE FROM check_evaluations WHERE rollout_id = ? LIMIT ?", id, BatchSize)
			if err != nil {
				return fmt.Errorf("delete old check evaluations: %w", err)
			}
			n, _ := res.RowsAffected()
			total += n
			if n < BatchSize {
				break
			}
		}
	}
	if total > 0 {
		c.log.Info("retention: deleted the check evaluations of ended rollouts", "evaluations", total, "rollouts", len(ids))
	}
	return nil
}

// pruneAuditLog deletes the audit records older than AuditTTL, oldest
// first, in batches along the created_at index (rows are only ever
// inserted, so nothing else locks them).
func (c *Cleaner) pruneAuditLog(ctx context.Context, conn *sql.Conn) error {
	cutoff := c.now().UTC().Add(-c.cfg.AuditTTL)
	total, err := deleteInBatches(ctx, conn, "DELETE FROM operator_audit_log WHERE created_at < ? ORDER BY created_at LIMIT ?", cutoff)
	if err != nil {
		return fmt.Errorf("delete old audit records: %w", err)
	}
	if total > 0 {
		c.log.Info("retention: deleted old audit records", "records", total, "older_than", c.cfg.AuditTTL)
	}
	return nil
}

// pruneStaleSyncs deletes, in batches, the sync rows that no longer
// describe their resource as the region desires it (kinds.CurrentSyncSQL):
// the resource is gone, or changed since the report. Region health ignores
// such rows already, but only while the change's row exists: once this
// cleaner deleted it, a stopped deployment's old failure, which an agent
// that never heard of the stop does not report again, would count again.
// A row superseded by a change the agent has yet to apply is written again
// by its next report. A row reported again since it was read has another
// reported_at, and stays.
func (c *Cleaner) pruneStaleSyncs(ctx context.Context, conn *sql.Conn) error {
	for {
		rows, err := conn.QueryContext(ctx, "SELECT s.id, s.reported_at FROM resource_syncs s WHERE NOT ("+kinds.CurrentSyncSQL+") LIMIT ?", BatchSize)
		if err != nil {
			return fmt.Errorf("find stale sync rows: %w", err)
		}
		var keys []any
		for rows.Next() {
			var id int64
			var reported time.Time
			if err := rows.Scan(&id, &reported); err != nil {
				rows.Close()
				return fmt.Errorf("find stale sync rows: %w", err)
			}
			keys = append(keys, id, reported)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find stale sync rows: %w", err)
		}
		if len(keys) == 0 {
			return nil
		}
		pairs := strings.TrimSuffix(strings.Repeat("(?, ?),", len(keys)/2), ",")
		if err := execRetrying(ctx, conn, "DELETE FROM resource_syncs WHERE (id, reported_at) IN ("+pairs+")", keys...); err != nil {
			return fmt.Errorf("delete stale sync rows: %w", err)
		}
		if len(keys)/2 < BatchSize {
			return nil
		}
	}
}

// pruneRevisions deletes the revisions of each deployment but its newest
// RevisionsKept: a script that scales in a loop would otherwise grow the
// table without end. Only deployments with more than that are touched
// (one pass over the (deployment_id, revision) index finds them), one
// index range each.
func (c *Cleaner) pruneRevisions(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `SELECT deployment_id, MAX(revision) - ? FROM deployment_revisions
		GROUP BY deployment_id HAVING COUNT(*) > ?`, c.cfg.RevisionsKept, c.cfg.RevisionsKept)
	if err != nil {
		return fmt.Errorf("find old revisions: %w", err)
	}
	type cut struct {
		deployment string
		upTo       int
	}
	var cuts []cut
	for rows.Next() {
		var k cut
		if err := rows.Scan(&k.deployment, &k.upTo); err != nil {
			rows.Close()
			return fmt.Errorf("find old revisions: %w", err)
		}
		cuts = append(cuts, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find old revisions: %w", err)
	}
	for _, k := range cuts {
		if err := execRetrying(ctx, conn, "DELETE FROM deployment_revisions WHERE deployment_id = ? AND revision <= ?", k.deployment, k.upTo); err != nil {
			return fmt.Errorf("delete old revisions of %s: %w", k.deployment, err)
		}
		// A rollout goes with the revision it moved to; one in flight
		// stays, whatever its age.
		if err := execRetrying(ctx, conn, "DELETE FROM rollouts WHERE deployment_id = ? AND revision <= ? AND in_flight IS NULL", k.deployment, k.upTo); err != nil {
			return fmt.Errorf("delete old rollouts of %s: %w", k.deployment, err)
		}
	}
	if len(cuts) > 0 {
		c.log.Info("retention: deleted old deployment revisions", "deployments", len(cuts), "kept_per_deployment", c.cfg.RevisionsKept)
	}
	return nil
}

// execRetrying runs a statement, again after a deadlock or another
// conflict (store.RetryConflict).
func execRetrying(ctx context.Context, conn *sql.Conn, query string, args ...any) error {
	return store.RetryConflict(ctx, func() error {
		_, err := conn.ExecContext(ctx, query, args...)
		return err
	})
}
