package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Querier runs a query: a pool (*sql.DB), a transaction (*sql.Tx,
// *ent.Tx) or an Ent client.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Now is the database's clock, in UTC to the microsecond (sessions speak
// UTC, see Open). What replicas must agree on in time (bakes, deadlines,
// promotion times, agent liveness) is stamped and aged by it, never by a
// replica's own clock: replicas whose clocks disagree by minutes then
// still agree on whether a bake is over or an agent alive.
func Now(ctx context.Context, q Querier) (time.Time, error) {
	rows, err := q.QueryContext(ctx, "SELECT NOW(6)")
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	defer rows.Close()
	var now time.Time
	if !rows.Next() {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", errors.Join(rows.Err(), sql.ErrNoRows))
	}
	if err := rows.Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now.UTC(), rows.Close()
}
