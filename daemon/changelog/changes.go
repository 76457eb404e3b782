package changelog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Change is one row of the change log.
type Change struct {
	Version    uint64
	Type       string // deployment_topology | sentinel | cilium_network_policy | gap
	ResourceID string
	Region     string
	CreatedAt  time.Time
}

// GapType marks the filler rows that settle holes; they name no resource
// and are never streamed.
const GapType = "gap"

// Querier runs a query: a *sql.DB, *sql.Conn or *sql.Tx, or an Ent
// transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Execer runs a statement: a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// After reads up to limit rows above version, in order (all regions).
func After(ctx context.Context, db Querier, version uint64, limit int) ([]Change, error) {
	return read(ctx, db, "WHERE pk > ? ORDER BY pk LIMIT ?", version, limit)
}

// Span is a closed range of versions.
type Span struct{ Lo, Hi uint64 }

// InSpans reads up to limit rows whose versions fall in any of spans, in
// order.
func InSpans(ctx context.Context, db Querier, spans []Span, limit int) ([]Change, error) {
	if len(spans) == 0 {
		return nil, nil
	}
	where := make([]string, len(spans))
	args := make([]any, 0, 2*len(spans)+1)
	for i, s := range spans {
		where[i] = "pk BETWEEN ? AND ?"
		args = append(args, s.Lo, s.Hi)
	}
	return read(ctx, db, "WHERE "+strings.Join(where, " OR ")+" ORDER BY pk LIMIT ?", append(args, limit)...)
}

// InRegion reads up to limit of region's rows above after and at most
// upTo, in order (the (region, pk) index).
func InRegion(ctx context.Context, db Querier, region string, after, upTo uint64, limit int) ([]Change, error) {
	return read(ctx, db, "WHERE region = ? AND pk > ? AND pk <= ? ORDER BY pk LIMIT ?", region, after, upTo, limit)
}

// read reads rows; where is the SQL after FROM.
func read(ctx context.Context, db Querier, where string, args ...any) ([]Change, error) {
	rows, err := db.QueryContext(ctx,
		"SELECT pk, resource_type, resource_id, region, created_at FROM deployment_changes "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read deployment_changes: %w", err)
	}
	defer rows.Close()
	var out []Change
	for rows.Next() {
		var c Change
		if err := rows.Scan(&c.Version, &c.Type, &c.ResourceID, &c.Region, &c.CreatedAt); err != nil {
			return nil, fmt.Errorf("read deployment_changes: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// InsertFillers inserts a filler row (GapType) at each of pks, unless a
// row holds it already: the statement waits behind a transaction still
// inserting that pk, so afterwards each pk is either a committed change or
// a filler, and the hole is settled (I2).
func InsertFillers(ctx context.Context, db Execer, pks []uint64) error {
	if len(pks) == 0 {
		return nil
	}
	values := strings.TrimSuffix(strings.Repeat("(?, '"+GapType+"', '', '', NOW(6)),", len(pks)), ",")
	args := make([]any, len(pks))
	for i, pk := range pks {
		args[i] = pk
	}
	_, err := db.ExecContext(ctx,
		"INSERT IGNORE INTO deployment_changes (pk, resource_type, resource_id, region, created_at) VALUES "+values, args...)
	if err != nil {
		return fmt.Errorf("insert filler rows: %w", err)
	}
	return nil
}
