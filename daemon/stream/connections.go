package stream

import (
	"context"
	"slices"
	"sync"
	"time"

	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/predicate"
)

// refreshBatch bounds the agent records one refresh statement marks, and
// refreshTimeout the time it may take.
const (
	refreshBatch   = 500
	refreshTimeout = 10 * time.Second
)

// connection is an agent record a stream of this process holds: the
// record is the stream's while connected_to names this process and
// connected_since is since.
type connection struct {
	region, identity string
	since            time.Time
}

// connections are the agent records this process's streams hold. One loop
// (RefreshConnections) marks them all as heard from, in batches, rather
// than a goroutine and a ticker per stream: an idle stream costs no
// goroutine for it, and 10,000 streams cost 20 statements per refresh, not
// 10,000.
type connections struct {
	mu   sync.Mutex
	live map[*connection]struct{}
}

// hold adds c until the returned release is called.
func (cs *connections) hold(c *connection) (release func()) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.live == nil {
		cs.live = map[*connection]struct{}{}
	}
	cs.live[c] = struct{}{}
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		delete(cs.live, c)
	}
}

func (cs *connections) list() []*connection {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	list := make([]*connection, 0, len(cs.live))
	for c := range cs.live {
		list = append(list, c)
	}
	return list
}

// RefreshConnections marks the agent records of this process's streams as
// heard from every Config.ConnectionRefresh, until ctx ends; a record
// another stream took over since is left alone. An agent's heartbeats do
// that too, but an agent sends none before its first full sync is applied,
// which may take long, and a record nothing refreshed for ten minutes may
// be given to a new identity in a full region
// (cluster.Config.MaxAgentsPerRegion). ctrld runs it once per process.
func (s *Streamer) RefreshConnections(ctx context.Context) {
	tick := time.NewTicker(s.cfg.ConnectionRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for batch := range slices.Chunk(s.connections.list(), refreshBatch) {
			held := make([]predicate.Agent, len(batch))
			for i, c := range batch {
				held[i] = entagent.And(entagent.Region(c.region), entagent.Identity(c.identity), entagent.ConnectedSince(c.since))
			}
			// Bounded: one batch stuck behind a lock must not hold up
			// the others' refresh for the lock wait's 50 s.
			batchCtx, cancel := context.WithTimeout(ctx, refreshTimeout)
			err := s.client.Agent.Update().
				Where(entagent.ConnectedTo(s.cfg.Instance), entagent.Or(held...)).
				SetUpdatedAt(time.Now().UTC()).Exec(batchCtx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("stream: refreshing the agents' records failed", "records", len(batch), "err", err)
			}
		}
	}
}
