package regionhealth

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/ent"
)

// AgentSilence: an agent that has not reported for this long counts as
// disconnected even if a ctrld still lists its stream (that ctrld may have
// died without recording the disconnect, or the agent may be frozen with
// its connection open). Agents report every 2 s, each heartbeat after the
// status it saw (agentd), and heartbeats are stamped and aged by the
// database's clock. A rollout's bake is never shorter (daemon/rollout):
// evidence may be this old.
const AgentSilence = 6 * time.Second

// Health is one region's sync health at one moment.
type Health struct {
	Region string
	Paused bool
	// PausedSince is when the current pause began (nil while running, or
	// for a pause from before it was recorded).
	PausedSince *time.Time
	// Head is the region's newest change version (0 without changes).
	Head uint64
	// Agent is the record of the agent that speaks for the region (see
	// pickAgent), nil when no agent ever reported or streamed.
	Agent *ent.Agent
	// Connected tells whether Agent is connected now.
	Connected bool
	// LagChanges counts the change rows above Agent's acked cursor (all
	// of the region's rows without an agent); PendingResources the
	// distinct resources they name.
	LagChanges, PendingResources int64
	// OldestPending is the oldest of those rows' creation time; zero
	// when none is pending.
	OldestPending time.Time
	// FailingResources counts the resources whose applies the agent
	// reports failing; OldestFailure is the one failing longest (views
	// only; nil for the gauges).
	FailingResources int64
	OldestFailure    *Failure
}

// Acked is the acked cursor of the agent that speaks for the region; 0
// without one.
func (h *Health) Acked() uint64 {
	if h.Agent == nil {
		return 0
	}
	return h.Agent.AckedCursor
}

// LagSeconds is how long the oldest pending change has waited at now; 0
// when none waits.
func (h *Health) LagSeconds(now time.Time) float64 {
	if h.OldestPending.IsZero() {
		return 0
	}
	return max(0, now.Sub(h.OldestPending).Seconds())
}

// Read returns the health of every registered region, or (name not "")
// of that one region: ent's not-found error when it is not registered.
func Read(ctx context.Context, client *ent.Client, db *sql.DB, name string, now time.Time) ([]*Health, error) {
	return read(ctx, client, db, name, now, true)
}

// ReadBrief is Read without PendingResources and OldestFailure, which
// read every pending change row and each failing region's failures: what
// the deployments view and the pending list need on every refresh.
func ReadBrief(ctx context.Context, client *ent.Client, db *sql.DB, name string, now time.Time) ([]*Health, error) {
	return read(ctx, client, db, name, now, false)
}

// Serving is whether a region's changes reach it now: not paused, and its
// agent connected; and how fresh what its agent reported is.
type Serving struct {
	Paused, Connected bool
	// Heard is the agent's last heartbeat (the database's clock): every
	// change of its Pods it saw before that is reported. ConnectedSince
	// is when its stream connected: what it reported before that may have
	// a gap (a ctrld restart, a move to another replica).
	Heard, ConnectedSince time.Time
}

// ReadServing returns Serving of every registered region, by name: two
// reads (regions, agents), not the heads, lag and failures of Read, for
// a caller that looks every second (the rollout driver).
func ReadServing(ctx context.Context, client *ent.Client, db *sql.DB, now time.Time) (map[string]Serving, error) {
	regions, err := client.Region.Query().All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read regions: %w", err)
	}
	agents, err := readAgents(ctx, db, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]Serving, len(regions))
	for _, r := range regions {
		a := pickAgent(agents, r.ID, now)
		s := Serving{Paused: r.Paused, Connected: a != nil && connected(a, now)}
		if s.Connected {
			s.Heard, s.ConnectedSince = *a.LastHeartbeat, *a.ConnectedSince
		}
		out[r.ID] = s
	}
	return out, nil
}

// read is Read; forViews says whether PendingResources and OldestFailure
// are wanted (the views show them; the gauges do not, and counting
// distinct resources reads every pending row of a region paused for days,
// on every replica every few seconds).
func read(ctx context.Context, client *ent.Client, db *sql.DB, name string, now time.Time, forViews bool) ([]*Health, error) {
	var regions []*ent.Region
	if name != "" {
		r, err := client.Region.Get(ctx, name)
		if err != nil {
			return nil, err // as it is: the views answer not-found with its text
		}
		regions = append(regions, r)
	} else {
		var err error
		if regions, err = client.Region.Query().All(ctx); err != nil {
			return nil, fmt.Errorf("read regions: %w", err)
		}
	}
	heads, err := changelog.Heads(ctx, db, name)
	if err != nil {
		return nil, err
	}
	agents, err := readAgents(ctx, db, name)
	if err != nil {
		return nil, err
	}
	out := make([]*Health, 0, len(regions))
	for _, r := range regions {
		h := &Health{Region: r.ID, Paused: r.Paused, Head: heads[r.ID], Agent: pickAgent(agents, r.ID, now)}
		if r.Paused {
			h.PausedSince = r.PausedAt
		}
		h.Connected = h.Agent != nil && connected(h.Agent, now)
		out = append(out, h)
	}
	if err := readFailures(ctx, db, out, name, forViews); err != nil {
		return nil, err
	}
	return out, fillLag(ctx, db, out, forViews)
}

// fillLag fills in what waits above each region's acked cursor (regions
// at their head have nothing waiting).
func fillLag(ctx context.Context, db *sql.DB, regions []*Health, countResources bool) error {
	above := map[string]uint64{}
	for _, h := range regions {
		if h.Head > h.Acked() {
			above[h.Region] = h.Acked()
		}
	}
	backlogs, err := changelog.Backlogs(ctx, db, above, countResources)
	if err != nil {
		return err
	}
	for _, h := range regions {
		if b, ok := backlogs[h.Region]; ok {
			h.LagChanges, h.PendingResources, h.OldestPending = b.Changes, b.Resources, b.Oldest
		}
	}
	return nil
}

// readAgents reads the agent records of one region, or (region "") all, with
// what the views show of them. Not through Ent: Ent scans an unsigned
// column through int64, so a single acked_cursor at or above 2^63 (intake
// refuses one, but a row written before that, or by hand, may hold it)
// would fail every view for everyone.
func readAgents(ctx context.Context, db *sql.DB, region string) ([]*ent.Agent, error) {
	q := "SELECT region, identity, acked_cursor, last_heartbeat, last_full_sync, last_error, last_full_sync_error, connected_to, connected_since FROM agents"
	var args []any
	if region != "" {
		q += " WHERE region = ?"
		args = append(args, region)
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read agent records: %w", err)
	}
	defer rows.Close()
	var out []*ent.Agent
	for rows.Next() {
		a := &ent.Agent{}
		var heartbeat, fullSync, connectedSince sql.NullTime
		if err := rows.Scan(&a.Region, &a.Identity, &a.AckedCursor, &heartbeat, &fullSync, &a.LastError, &a.LastFullSyncError, &a.ConnectedTo, &connectedSince); err != nil {
			return nil, fmt.Errorf("read agent records: %w", err)
		}
		a.LastHeartbeat, a.LastFullSync, a.ConnectedSince = timeOrNil(heartbeat), timeOrNil(fullSync), timeOrNil(connectedSince)
		out = append(out, a)
	}
	return out, rows.Err()
}

func timeOrNil(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

// pickAgent returns the agent that speaks for region among agents: a
// connected one before others, then the one heard from last. Nil when
// none of them serves region.
func pickAgent(agents []*ent.Agent, region string, now time.Time) *ent.Agent {
	var best *ent.Agent
	score := func(a *ent.Agent) (bool, time.Time) {
		var hb time.Time
		if a.LastHeartbeat != nil {
			hb = *a.LastHeartbeat
		}
		return connected(a, now), hb
	}
	for _, a := range agents {
		if a.Region != region {
			continue
		}
		if best == nil {
			best = a
			continue
		}
		ac, ah := score(a)
		bc, bh := score(best)
		if (ac && !bc) || (ac == bc && ah.After(bh)) {
			best = a
		}
	}
	return best
}

// connected tells whether a holds a stream to some ctrld and reported
// within AgentSilence, both by the database's clock (now is read from it).
func connected(a *ent.Agent, now time.Time) bool {
	return a.ConnectedTo != "" && a.LastHeartbeat != nil && a.ConnectedSince != nil && now.Sub(*a.LastHeartbeat) < AgentSilence
}
