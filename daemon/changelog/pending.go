package changelog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Heads returns the newest change version of one region or (region "")
// of every region: one loose scan of the (region, pk) index.
func Heads(ctx context.Context, db Querier, region string) (map[string]uint64, error) {
	q, args := "SELECT region, MAX(pk) FROM deployment_changes WHERE region <> ''", []any(nil)
	if region != "" {
		q, args = "SELECT region, MAX(pk) FROM deployment_changes WHERE region = ?", []any{region}
	}
	rows, err := db.QueryContext(ctx, q+" GROUP BY region", args...)
	if err != nil {
		return nil, fmt.Errorf("read head versions: %w", err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var name string
		var head uint64
		if err := rows.Scan(&name, &head); err != nil {
			return nil, fmt.Errorf("read head versions: %w", err)
		}
		out[name] = head
	}
	return out, rows.Err()
}

// Backlog is what waits in one region above a cursor.
type Backlog struct {
	// Changes counts the rows; Resources the distinct resources they name
	// (when counted).
	Changes, Resources int64
	// Oldest is the oldest row's creation time.
	Oldest time.Time
}

// Backlogs returns, for each region of above, what waits above its
// cursor, in one query (an index range per region) however many regions
// there are; regions with nothing above are left out. Counting distinct
// resources reads every pending row; countResources says whether it is
// wanted.
func Backlogs(ctx context.Context, db Querier, above map[string]uint64, countResources bool) (map[string]Backlog, error) {
	out := map[string]Backlog{}
	if len(above) == 0 {
		return out, nil
	}
	where := make([]string, 0, len(above))
	args := make([]any, 0, 2*len(above))
	for region, cursor := range above {
		where = append(where, "(region = ? AND pk > ?)")
		args = append(args, region, cursor)
	}
	resources := "0"
	if countResources {
		resources = "COUNT(DISTINCT resource_type, resource_id)"
	}
	rows, err := db.QueryContext(ctx,
		"SELECT region, COUNT(*), "+resources+", MIN(created_at) FROM deployment_changes WHERE "+
			strings.Join(where, " OR ")+" GROUP BY region", args...)
	if err != nil {
		return nil, fmt.Errorf("compute lag: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var region string
		var b Backlog
		var oldest sql.NullTime
		if err := rows.Scan(&region, &b.Changes, &b.Resources, &oldest); err != nil {
			return nil, fmt.Errorf("compute lag: %w", err)
		}
		b.Oldest = oldest.Time
		out[region] = b
	}
	return out, rows.Err()
}

// Resource names a resource the way change rows do: its type and ID.
type Resource struct{ Type, ID string }

// PendingPerResource counts region's rows above cursor per resource. It
// reads every one of them: callers bound it (see regionhealth).
func PendingPerResource(ctx context.Context, db Querier, region string, cursor uint64) (map[Resource]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT resource_type, resource_id, COUNT(*) FROM deployment_changes
		WHERE region = ? AND pk > ? GROUP BY resource_type, resource_id`, region, cursor)
	if err != nil {
		return nil, fmt.Errorf("count pending changes per resource: %w", err)
	}
	defer rows.Close()
	out := map[Resource]int64{}
	for rows.Next() {
		var r Resource
		var n int64
		if err := rows.Scan(&r.Type, &r.ID, &n); err != nil {
			return nil, fmt.Errorf("count pending changes per resource: %w", err)
		}
		out[r] = n
	}
	return out, rows.Err()
}

// ResourceSpan is the range of a resource's row versions above after
// that q sees; 0, 0 when there are none (the (resource_type, resource_id,
// pk) index).
func ResourceSpan(ctx context.Context, q Querier, typ, id string, after uint64) (Span, error) {
	rows, err := q.QueryContext(ctx,
		"SELECT MIN(pk), MAX(pk) FROM deployment_changes WHERE resource_type = ? AND resource_id = ? AND pk > ?", typ, id, after)
	if err != nil {
		return Span{}, fmt.Errorf("read the change range of %s %s: %w", typ, id, err)
	}
	defer rows.Close()
	var lo, hi sql.Null[uint64]
	if rows.Next() {
		if err := rows.Scan(&lo, &hi); err != nil {
			return Span{}, err
		}
	}
	return Span{Lo: lo.V, Hi: hi.V}, rows.Err()
}

// NoChangeAbove is an SQL condition, for a query of another table to
// embed, that holds when the resource its arguments name (SQL expressions
// of that query: the resource type, ID and region) has no change above
// version (an SQL expression too). It uses the (resource_type,
// resource_id, pk) index.
func NoChangeAbove(typ, id, region, version string) string {
	return "NOT EXISTS (SELECT 1 FROM deployment_changes c WHERE c.resource_type = " + typ +
		" AND c.resource_id = " + id + " AND c.region = " + region + " AND c.pk > " + version + ")"
}

// ResourceHeads is, per region, the newest of a resource's row versions
// above after that q sees (the (resource_type, resource_id, pk) index):
// what an agent must have applied to run what those rows changed.
func ResourceHeads(ctx context.Context, q Querier, typ, id string, after uint64) (map[string]uint64, error) {
	rows, err := q.QueryContext(ctx,
		"SELECT region, MAX(pk) FROM deployment_changes WHERE resource_type = ? AND resource_id = ? AND pk > ? GROUP BY region", typ, id, after)
	if err != nil {
		return nil, fmt.Errorf("read the newest changes of %s %s: %w", typ, id, err)
	}
	defer rows.Close()
	heads := map[string]uint64{}
	for rows.Next() {
		var region string
		var pk uint64
		if err := rows.Scan(&region, &pk); err != nil {
			return nil, err
		}
		heads[region] = pk
	}
	return heads, rows.Err()
}
