package changelog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Names of the rows in stream_marks.
const (
	// MarkSafeWatermark: every deployment_changes pk at or below it is
	// committed or dead.
	MarkSafeWatermark = "safe_watermark"
	// MarkCleanupFloor: retention may have deleted every pk at or below it,
	// so a client cursor below it cannot be served incrementally.
	MarkCleanupFloor = "cleanup_floor"
)

// ReadMark returns a stream mark, 0 when it was never set.
func ReadMark(ctx context.Context, db *sql.DB, name string) (uint64, error) {
	var v uint64
	err := db.QueryRowContext(ctx, "SELECT value FROM stream_marks WHERE id = ?", name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read stream mark %s: %w", name, err)
	}
	return v, nil
}

// NewestVersion is the highest version this database has issued: its
// newest change row, or the persisted safe watermark once retention has
// deleted the rows up to it. Every cursor a ctrld hands out is at most this,
// so a cursor or an acked version above it comes from another history (a
// restore, a failover that lost transactions) or from a lying client.
func NewestVersion(ctx context.Context, db *sql.DB) (uint64, error) {
	var newest uint64
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(pk), 0) FROM deployment_changes").Scan(&newest); err != nil {
		return 0, fmt.Errorf("read the newest version: %w", err)
	}
	persisted, err := ReadMark(ctx, db, MarkSafeWatermark)
	if err != nil {
		return 0, err
	}
	return max(newest, persisted), nil
}

// RaiseMark sets a stream mark to v unless it is already higher: marks
// only grow, whichever replica writes last.
func RaiseMark(ctx context.Context, db *sql.DB, name string, v uint64) error {
	_, err := db.ExecContext(ctx,
		"INSERT INTO stream_marks (id, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = GREATEST(value, VALUES(value))",
		name, v)
	if err != nil {
		return fmt.Errorf("raise stream mark %s: %w", name, err)
	}
	return nil
}
