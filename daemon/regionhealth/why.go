package regionhealth

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/rpc"
)

// Reason codes, stable for scripts (ctrlv1.SyncReason.code).
const (
	ReasonPaused          = "paused"
	ReasonNoAgent         = "no_agent"
	ReasonAgentDown       = "agent_down"
	ReasonApplyFailing    = "apply_failing"
	ReasonFullSyncFailing = "full_sync_failing"
	ReasonAgentError      = "agent_error"
	ReasonWaiting         = "waiting"
)

// Reason is one reason a region, or a resource in it, is not in sync.
type Reason struct {
	Code    string
	Message string
	// Since is when it began; zero when not known.
	Since time.Time
	// Resource names the resource ("deployment/api") when it is about one.
	Resource string
}

// Failure is a resource whose applies fail, as its agent reported.
type Failure struct {
	Kind, ResourceID, Error string
	Since                   time.Time
}

// Resource returns "kind/id".
func (f Failure) Resource() string { return ResourceKey{Kind: f.Kind, ID: f.ResourceID}.String() }

// Why says why the region is not in sync at now, most pressing first: what
// stops changes from reaching the cluster (a pause, no agent or a dead
// one), then what the agent fails at, then how much waits. Empty when the
// region is in sync.
func (h *Health) Why(now time.Time) []Reason {
	var out []Reason
	out = append(out, h.blockers(now)...)
	if h.Agent != nil && h.Agent.LastFullSyncError != "" {
		out = append(out, Reason{Code: ReasonFullSyncFailing, Message: "the last full sync did not complete: " + h.Agent.LastFullSyncError})
	}
	if f := h.OldestFailure; f != nil {
		msg := fmt.Sprintf("%s apply failing since %s: %s", f.Resource(), clock(f.Since, now), f.Error)
		if h.FailingResources > 1 {
			msg = fmt.Sprintf("%d resources failing to apply; the longest: %s", h.FailingResources, msg)
		}
		out = append(out, Reason{Code: ReasonApplyFailing, Message: msg, Since: f.Since, Resource: f.Resource()})
	} else if h.Connected && h.Agent.LastError != "" && h.Agent.LastError != h.Agent.LastFullSyncError {
		// (An incomplete full sync is also the agent's last error; it is
		// said once, above.)
		out = append(out, Reason{Code: ReasonAgentError, Message: "the agent reports: " + h.Agent.LastError})
	}
	if h.LagChanges > 0 {
		out = append(out, Reason{Code: ReasonWaiting, Since: h.OldestPending,
			Message: fmt.Sprintf("waiting for %s (oldest %s)", plural(h.LagChanges, "change"), age(h.OldestPending, now))})
	}
	return out
}

// WhyResource says why one resource of the region is not in sync: its
// failing apply, and, when changes of it wait, what holds them (the
// region's blockers) or how many there are. pending counts its changes
// above the acked cursor (PendingUnknown when not counted); failure is nil
// unless its applies fail.
func (h *Health) WhyResource(resource string, pending int64, failure *Failure, now time.Time) []Reason {
	var out []Reason
	if failure != nil {
		out = append(out, Reason{Code: ReasonApplyFailing, Since: failure.Since, Resource: resource,
			Message: fmt.Sprintf("apply failing since %s: %s", clock(failure.Since, now), failure.Error)})
	}
	if pending == 0 {
		return out
	}
	waiting := plural(pending, "change") + " wait"
	if pending == PendingUnknown {
		waiting = fmt.Sprintf("changes may wait (the region has %d pending, too many to count per resource)", h.LagChanges)
	}
	if blockers := h.blockers(now); len(blockers) > 0 {
		for _, b := range blockers {
			b.Message = waiting + ": " + b.Message
			b.Resource = resource
			out = append(out, b)
		}
		return out
	}
	if failure == nil {
		msg := "waiting for " + plural(pending, "change") + " to be applied"
		if pending == PendingUnknown {
			msg = waiting + ": its agent is catching up"
		}
		out = append(out, Reason{Code: ReasonWaiting, Resource: resource, Message: msg})
	}
	return out
}

// blockers are what keeps every change from reaching the region's cluster.
func (h *Health) blockers(now time.Time) []Reason {
	var out []Reason
	if h.Paused {
		r := Reason{Code: ReasonPaused, Message: "the region is paused"}
		if h.PausedSince != nil {
			r.Since = *h.PausedSince
			r.Message += " since " + clock(r.Since, now)
		}
		r.Message += "; resume it to deliver changes"
		out = append(out, r)
	}
	switch a := h.Agent; {
	case a == nil:
		out = append(out, Reason{Code: ReasonNoAgent, Message: "no agent has ever connected for this region"})
	case !h.Connected:
		r := Reason{Code: ReasonAgentDown, Message: "the agent is down"}
		if a.LastHeartbeat != nil {
			r.Since = *a.LastHeartbeat
			r.Message += " (last heard " + clock(r.Since, now) + ")"
		}
		if a.LastError != "" {
			r.Message += "; its last error: " + a.LastError
		}
		out = append(out, r)
	}
	return out
}

// readFailures fills FailingResources and, if longest, OldestFailure (the
// longest-failing resource) of the regions: all of them for name "", else
// the one. One query whatever the number of failing regions: the count
// and the longest come from window functions over each region's failing
// rows (the (region, in_sync) index).
func readFailures(ctx context.Context, db *sql.DB, regions []*Health, name string, longest bool) error {
	where, args := "", []any(nil)
	if name != "" {
		where, args = " AND region = ?", []any{name}
	}
	rows, err := db.QueryContext(ctx, `SELECT region, failing, kind, resource_id, error, failing_since FROM (
		SELECT region, kind, resource_id, error, failing_since,
			COUNT(*) OVER (PARTITION BY region) AS failing,
			ROW_NUMBER() OVER (PARTITION BY region ORDER BY failing_since IS NULL, failing_since, id) AS nth
		FROM resource_syncs s WHERE in_sync = FALSE AND error <> '' AND `+kinds.CurrentSyncSQL+where+`) failures
		WHERE nth = 1`, args...)
	if err != nil {
		return fmt.Errorf("read failing resources: %w", err)
	}
	defer rows.Close()
	byRegion := map[string]*Health{}
	for _, h := range regions {
		byRegion[h.Region] = h
	}
	for rows.Next() {
		var region string
		var n int64
		f := &Failure{}
		var since sql.NullTime
		if err := rows.Scan(&region, &n, &f.Kind, &f.ResourceID, &f.Error, &since); err != nil {
			return fmt.Errorf("read failing resources: %w", err)
		}
		h := byRegion[region]
		if h == nil {
			continue // registered after the regions were read
		}
		h.FailingResources = n
		if longest {
			f.Since = since.Time
			h.OldestFailure = f
		}
	}
	return rows.Err()
}

// clock shows t as a time of day, with how long ago.
func clock(t, now time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format("15:04:05") + " UTC (" + age(t, now) + " ago)"
}

// age shows how long ago t was, in the largest whole unit.
func age(t, now time.Time) string {
	d := max(0, now.Sub(t))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ResourceKey names a resource of a region the way agents report it.
type ResourceKey = rpc.Resource

// ResourceSync is one resource's sync state in a region: what its agent
// last reported (Reported false when it has not), and how many of its
// changes wait above the region's acked cursor.
type ResourceSync struct {
	Reported       bool
	AppliedVersion uint64
	InSync         bool
	Error          string
	FailingSince   time.Time
	ReportedAt     time.Time
	Pending        int64
}

// Failure returns the resource's failing apply, nil if it is not failing.
func (s *ResourceSync) Failure(key ResourceKey) *Failure {
	if s == nil || s.InSync || s.Error == "" {
		return nil
	}
	return &Failure{Kind: key.Kind, ResourceID: key.ID, Error: s.Error, Since: s.FailingSince}
}

// maxPendingCount bounds the pending change rows ReadResources reads to
// count them per resource: a region paused for days can have millions, and
// the views read this on every refresh.
const maxPendingCount = 50_000

// NoStatePending is the pending count of a resource ReadResources
// returned no state for: none, or unknown when it did not count.
func (h *Health) NoStatePending() int64 {
	if h.LagChanges > maxPendingCount {
		return PendingUnknown
	}
	return 0
}

// PendingUnknown is ResourceSync.Pending when the region has more than
// maxPendingCount pending changes: every resource may have some.
const PendingUnknown = -1

// ReadResources returns the sync state of h's region's resources that
// have one: a report from the agent, or changes waiting. Above
// maxPendingCount pending changes, pending is not counted per resource:
// every state's Pending is PendingUnknown, and so is that of a resource
// without a state (NoStatePending).
func ReadResources(ctx context.Context, db *sql.DB, h *Health) (map[ResourceKey]*ResourceSync, error) {
	out := map[ResourceKey]*ResourceSync{}
	rows, err := db.QueryContext(ctx, `SELECT kind, resource_id, applied_version, in_sync, error, failing_since, reported_at
		FROM resource_syncs s WHERE region = ? AND `+kinds.CurrentSyncSQL, h.Region)
	if err != nil {
		return nil, fmt.Errorf("read resource sync states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k ResourceKey
		s := &ResourceSync{Reported: true}
		var since sql.NullTime
		if err := rows.Scan(&k.Kind, &k.ID, &s.AppliedVersion, &s.InSync, &s.Error, &since, &s.ReportedAt); err != nil {
			return nil, fmt.Errorf("read resource sync states: %w", err)
		}
		s.FailingSince = since.Time
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read resource sync states: %w", err)
	}
	if h.LagChanges == 0 {
		return out, nil
	}
	if h.LagChanges > maxPendingCount {
		for _, s := range out {
			s.Pending = PendingUnknown
		}
		return out, nil
	}
	pending, err := changelog.PendingPerResource(ctx, db, h.Region, h.Acked())
	if err != nil {
		return nil, err
	}
	for r, n := range pending {
		kind, ok := kinds.OfChange(r.Type)
		if !ok {
			continue // a kind this build does not know
		}
		k := ResourceKey{Kind: kind.Name, ID: r.ID}
		if out[k] == nil {
			out[k] = &ResourceSync{}
		}
		out[k].Pending = n
	}
	return out, nil
}
