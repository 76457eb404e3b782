package changelog

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// NewestBefore is the highest version of a row created before t; 0 when
// there is none (the created_at index).
func NewestBefore(ctx context.Context, db Querier, t time.Time) (uint64, error) {
	rows, err := db.QueryContext(ctx, "SELECT MAX(pk) FROM deployment_changes WHERE created_at < ?", t)
	if err != nil {
		return 0, fmt.Errorf("read the newest version before %s: %w", t.Format(time.RFC3339), err)
	}
	defer rows.Close()
	var pk sql.Null[uint64]
	if rows.Next() {
		if err := rows.Scan(&pk); err != nil {
			return 0, err
		}
	}
	return pk.V, rows.Err()
}

// DeletePrefix deletes up to limit of the oldest rows at or below upTo,
// and returns how many it deleted. Retention calls it after raising the
// cleanup floor to upTo (I5), until fewer than limit go.
func DeletePrefix(ctx context.Context, db Execer, upTo uint64, limit int) (int64, error) {
	res, err := db.ExecContext(ctx, "DELETE FROM deployment_changes WHERE pk <= ? ORDER BY pk LIMIT ?", upTo, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old changes: %w", err)
	}
	return res.RowsAffected()
}
