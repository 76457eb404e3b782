package stream

import (
	"context"
	"fmt"

	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fullSync sends every resource the region should run, read after the
// subscription fixed W, then the full_sync_done bookmark at W. Live changes
// are relayed between pages.
//
// Each page is read in a short snapshot of its own that ends before the
// page is sent: no database connection or transaction is held while the
// stream waits on its client (invariant I8). That is as correct as one
// snapshot for the whole sync (I3). The events are versioned W. A page,
// read at whatever moment after the subscription began, shows every change
// committed before it began (all up to W, which are settled, and the early
// ones above) and maybe later ones: state at least as new as W. Every
// change that commits after the subscription began is above W and is
// delivered live, between pages or after the bookmark, with the state
// loaded then, so whatever a page showed is followed by anything newer. A
// resource created behind the page cursor, or deleted ahead of it, is such
// a change too. Resources already sent live are skipped by later pages:
// their live event was loaded after the change that caused it and is
// followed by every later one.
func (s *Streamer) fullSync(ctx context.Context, sub *tailer.Subscription, st *state) error {
	s.metrics.FullSyncs.WithLabelValues(st.req.Region).Inc()
	st.generation = sub.Control.ResyncGeneration
	w := sub.Watermark
	// Resources sent from live changes carry newer state than the pages.
	sentLive := map[resourceKey]bool{}
	between := func() error { return s.relayLive(ctx, sub, st, sentLive) }

	topologyType := string(deploymentchange.ResourceTypeDeploymentTopology)
	err := pages(ctx, s, st, between, func(c *ent.Client, after int, limit int) (int, int, []*ctrlv1.DeploymentChangeEvent, error) {
		rows, err := c.DeploymentTopology.Query().
			Where(deploymenttopology.Region(st.req.Region),
				deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning),
				deploymenttopology.IDGT(after)).
			Order(ent.Asc(deploymenttopology.FieldID)).Limit(limit).
			WithDeployment().All(ctx)
		if err != nil {
			return 0, 0, nil, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, t := range rows {
			if !sentLive[resourceKey{topologyType, t.DeploymentID}] {
				events = append(events, withVersion(deploymentEvent(t, t.Edges.Deployment), w))
			}
			after = t.ID
		}
		return after, len(rows), events, nil
	})
	if err != nil {
		return fmt.Errorf("full sync: topologies: %w", err)
	}

	sentinelType := string(deploymentchange.ResourceTypeSentinel)
	err = pages(ctx, s, st, between, func(c *ent.Client, after string, limit int) (string, int, []*ctrlv1.DeploymentChangeEvent, error) {
		rows, err := c.Sentinel.Query().
			Where(sentinel.Region(st.req.Region), sentinel.DesiredStateEQ(sentinel.DesiredStateRunning), sentinel.IDGT(after)).
			Order(ent.Asc(sentinel.FieldID)).Limit(limit).All(ctx)
		if err != nil {
			return "", 0, nil, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, r := range rows {
			if !sentLive[resourceKey{sentinelType, r.ID}] {
				events = append(events, withVersion(sentinelEvent(r), w))
			}
			after = r.ID
		}
		return after, len(rows), events, nil
	})
	if err != nil {
		return fmt.Errorf("full sync: sentinels: %w", err)
	}

	policyType := string(deploymentchange.ResourceTypeCiliumNetworkPolicy)
	err = pages(ctx, s, st, between, func(c *ent.Client, after string, limit int) (string, int, []*ctrlv1.DeploymentChangeEvent, error) {
		rows, err := c.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.Region(st.req.Region), ciliumnetworkpolicy.IDGT(after)).
			Order(ent.Asc(ciliumnetworkpolicy.FieldID)).Limit(limit).All(ctx)
		if err != nil {
			return "", 0, nil, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, r := range rows {
			after = r.ID
			if sentLive[resourceKey{policyType, r.ID}] {
				continue
			}
			ev, err := policyEvent(r)
			if err != nil {
				return "", 0, nil, err
			}
			events = append(events, withVersion(ev, w))
		}
		return after, len(rows), events, nil
	})
	if err != nil {
		return fmt.Errorf("full sync: policies: %w", err)
	}

	st.seen = max(st.seen, w)
	if err := s.bookmark(st, true); err != nil {
		return err
	}
	if err := s.recordSyncedGeneration(ctx, st.req, st.generation); err != nil {
		return fmt.Errorf("full sync: record: %w", err)
	}
	// From here on the client has everything up to the bookmark.
	st.clientCursor = st.bookmarked
	return nil
}

// relayLive sends the live changes waiting on the subscription (without
// blocking) and remembers their resources.
func (s *Streamer) relayLive(ctx context.Context, sub *tailer.Subscription, st *state, sentLive map[resourceKey]bool) error {
	for {
		select {
		case n, ok := <-sub.C():
			if !ok {
				return sub.Err()
			}
			st.control = n.Control
			if n.Control.Paused || st.heldBack {
				// Paused mid-sync: relay nothing more and move no
				// watermark; the stream catches up from the full sync's
				// bookmark afterwards, which covers these changes.
				st.heldBack = true
				continue
			}
			fresh := n.Changes[:0:0]
			for _, c := range n.Changes {
				if c.Version > st.clientCursor {
					fresh = append(fresh, c)
					sentLive[resourceKey{c.Type, c.ResourceID}] = true
				}
			}
			events, err := loadEvents(ctx, s.client, st.req.Region, fresh)
			if err != nil {
				return err
			}
			if err := s.sendEvents(st, events); err != nil {
				return err
			}
			// The watermark moves on, but no bookmark may be sent before
			// the last page is: it would claim a full sync.
			st.seen = max(st.seen, n.Watermark)
		default:
			return nil
		}
	}
}

// pageReader reads up to limit rows after the key through c and returns
// the last key it read, how many rows, and the events to send.
type pageReader[K any] func(c *ent.Client, after K, limit int) (K, int, []*ctrlv1.DeploymentChangeEvent, error)

// inSnapshot reads one page in a short snapshot of its own, which has ended
// when it returns (a panic included), holding one of the MaxFullSyncs
// slots meanwhile. The slot bounds the full syncs reading at once; it is
// never held while the page is sent, so a client that reads slowly (or
// not at all) keeps no other stream from syncing.
func (read pageReader[K]) inSnapshot(ctx context.Context, s *Streamer, after K, limit int) (K, int, []*ctrlv1.DeploymentChangeEvent, error) {
	release, err := s.takeFullSyncSlot(ctx)
	if err != nil {
		return after, 0, nil, err
	}
	defer release()
	tx, err := beginSnapshot(ctx, s.client)
	if err != nil {
		return after, 0, nil, err
	}
	defer tx.Rollback()
	return read(tx.Client(), after, limit)
}

// pages runs a keyset page loop: each page is read in its own snapshot,
// which ends before the page's events are sent; between runs after every
// page that may have more behind it. (A function, not a method: methods
// cannot have type parameters.)
func pages[K any](ctx context.Context, s *Streamer, st *state, between func() error, read pageReader[K]) error {
	var after K
	for {
		last, n, events, err := read.inSnapshot(ctx, s, after, s.cfg.PageSize)
		if err != nil || n == 0 {
			return err
		}
		if err := s.sendEvents(st, events); err != nil {
			return err
		}
		after = last
		if err := between(); err != nil {
			return err
		}
		if n < s.cfg.PageSize {
			return nil
		}
	}
}

func withVersion(ev *ctrlv1.DeploymentChangeEvent, v uint64) *ctrlv1.DeploymentChangeEvent {
	ev.Version = v
	return ev
}
