package stream

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fullSync sends every resource the region should run, from one consistent
// snapshot taken after the subscription fixed W, then the full_sync_done
// bookmark at W. Live changes are relayed between pages.
func (s *Streamer) fullSync(ctx context.Context, sub *tailer.Subscription, st *state) error {
	s.metrics.FullSyncs.WithLabelValues(st.req.Region).Inc()
	st.generation = sub.Control.ResyncGeneration
	w := sub.Watermark
	// Resources sent from live changes carry newer state than the snapshot.
	sentLive := map[resourceKey]bool{}

	tx, err := s.client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("full sync: begin snapshot: %w", err)
	}
	defer tx.Rollback()

	between := func() error { return s.relayLive(ctx, sub, st, sentLive) }
	topologyType := string(deploymentchange.ResourceTypeDeploymentTopology)
	err = pages(s.cfg.PageSize, func(after int, limit int) (int, int, error) {
		rows, err := tx.DeploymentTopology.Query().
			Where(deploymenttopology.Region(st.req.Region),
				deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning),
				deploymenttopology.IDGT(after)).
			Order(ent.Asc(deploymenttopology.FieldID)).Limit(limit).
			WithDeployment().All(ctx)
		if err != nil {
			return 0, 0, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, t := range rows {
			if !sentLive[resourceKey{topologyType, t.DeploymentID}] {
				events = append(events, withVersion(deploymentEvent(t, t.Edges.Deployment), w))
			}
			after = t.ID
		}
		return after, len(rows), s.sendEvents(st, events)
	}, between)
	if err != nil {
		return fmt.Errorf("full sync: topologies: %w", err)
	}

	sentinelType := string(deploymentchange.ResourceTypeSentinel)
	err = pages(s.cfg.PageSize, func(after string, limit int) (string, int, error) {
		rows, err := tx.Sentinel.Query().
			Where(sentinel.Region(st.req.Region), sentinel.DesiredStateEQ(sentinel.DesiredStateRunning), sentinel.IDGT(after)).
			Order(ent.Asc(sentinel.FieldID)).Limit(limit).All(ctx)
		if err != nil {
			return "", 0, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, r := range rows {
			if !sentLive[resourceKey{sentinelType, r.ID}] {
				events = append(events, withVersion(sentinelEvent(r), w))
			}
			after = r.ID
		}
		return after, len(rows), s.sendEvents(st, events)
	}, between)
	if err != nil {
		return fmt.Errorf("full sync: sentinels: %w", err)
	}

	policyType := string(deploymentchange.ResourceTypeCiliumNetworkPolicy)
	err = pages(s.cfg.PageSize, func(after string, limit int) (string, int, error) {
		rows, err := tx.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.Region(st.req.Region), ciliumnetworkpolicy.IDGT(after)).
			Order(ent.Asc(ciliumnetworkpolicy.FieldID)).Limit(limit).All(ctx)
		if err != nil {
			return "", 0, err
		}
		var events []*ctrlv1.DeploymentChangeEvent
		for _, r := range rows {
			if sentLive[resourceKey{policyType, r.ID}] {
				after = r.ID
				continue
			}
			ev, err := policyEvent(r)
			if err != nil {
				return "", 0, err
			}
			events = append(events, withVersion(ev, w))
			after = r.ID
		}
		return after, len(rows), s.sendEvents(st, events)
	}, between)
	if err != nil {
		return fmt.Errorf("full sync: policies: %w", err)
	}
	tx.Rollback()

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
			// the snapshot is complete: it would claim a full sync.
			st.seen = max(st.seen, n.Watermark)
		default:
			return nil
		}
	}
}

// pages runs a keyset page loop: page reads up to limit rows after the
// key and returns the last key it read and how many rows; between runs
// after every page that may have more behind it.
func pages[K any](size int, page func(after K, limit int) (K, int, error), between func() error) error {
	var after K
	for {
		last, n, err := page(after, size)
		if err != nil || n == 0 {
			return err
		}
		after = last
		if err := between(); err != nil {
			return err
		}
		if n < size {
			return nil
		}
	}
}

func withVersion(ev *ctrlv1.DeploymentChangeEvent, v uint64) *ctrlv1.DeploymentChangeEvent {
	ev.Version = v
	return ev
}
