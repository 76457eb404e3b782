package stream

import (
	"context"
	"fmt"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/tailer"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fullSync sends every resource the region should run, read after the
// subscription fixed W, then the full_sync_done bookmark at W. Live changes
// are relayed between pages.
//
// Each page is read in a short snapshot of its own (one statement) that
// ends before the page is sent (while the page before it is sent: see
// syncKind): no database connection or transaction is held while the
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
	sentLive := map[changelog.Resource]bool{}
	between := func() error { return s.relayLive(ctx, sub, st, sentLive) }

	for _, kind := range kinds.All {
		if err := s.syncKind(ctx, st, kind, w, sentLive, between); err != nil {
			return fmt.Errorf("full sync: %s resources: %w", kind.Name, err)
		}
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
func (s *Streamer) relayLive(ctx context.Context, sub *tailer.Subscription, st *state, sentLive map[changelog.Resource]bool) error {
	for {
		notices, ok := sub.Take(maxNoticesPerRelay)
		if !ok {
			return sub.Err()
		}
		if len(notices) == 0 {
			return nil
		}
		// Whatever waits makes one state load, as in follow.
		var changes []changelog.Change
		for _, n := range notices {
			st.control = n.Control
			if n.Control.Paused || st.heldBack {
				// Paused mid-sync: relay nothing more and move no
				// watermark; the stream catches up from the full sync's
				// bookmark afterwards, which covers these changes.
				st.heldBack = true
				continue
			}
			changes = append(changes, n.Changes...)
			// The watermark moves on, but no bookmark may be sent before
			// the last page is: it would claim a full sync.
			st.seen = max(st.seen, n.Watermark)
		}
		for _, c := range changes {
			if c.Version > st.clientCursor {
				sentLive[changelog.Resource{Type: c.Type, ID: c.ResourceID}] = true
			}
		}
		if err := s.sendChanges(ctx, st, changes); err != nil {
			return err
		}
	}
}

// syncKind sends every resource of one kind the region should run, page
// by page (keyset pages, in the kind's key order), versioned w; between
// runs after every page that may have more behind it. Resources already
// sent live are skipped.
//
// Pages are read one ahead: while one is sent, readPages reads the next,
// so that the database's time and the client's overlap instead of adding
// up (the client's share of a page is its events going through gRPC). At
// most one page waits, read, beside the one being sent: the heap stays
// O(page). Which resources were sent live is asked when a page is sent,
// not when it was read, so that a live event is never followed by an
// older page's.
func (s *Streamer) syncKind(ctx context.Context, st *state, kind kinds.Kind, w uint64, sentLive map[changelog.Resource]bool, between func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	pages := make(chan []kinds.Event) // unbuffered: one page read ahead, no more
	read := make(chan struct{})
	var readErr error
	go func() {
		defer close(read)
		readErr = s.readPages(ctx, kind, st.req.Region, pages)
	}()
	// The reader ends before the stream goes on: it holds a database
	// connection while it reads.
	defer func() { cancel(); <-read }()
	for page := range pages {
		events := make([]*ctrlv1.DeploymentChangeEvent, 0, len(page))
		for _, e := range page {
			if !sentLive[changelog.Resource{Type: kind.ChangeType, ID: e.ID}] {
				events = append(events, e.Event)
			}
		}
		if err := s.sendPage(st, kind.Name, w, events); err != nil {
			return err
		}
		if err := between(); err != nil {
			return err
		}
	}
	// No more pages: the kind was sent whole only if the reader says so.
	// It also stops for an error or for ctx's end, and a kind cut short
	// must never be followed by the full sync's bookmark: the agent would
	// delete what the missing pages hold (I3).
	<-read
	return readErr
}

// readPages reads kind's pages of region in order into out, closing it when
// it stops, and returns nil only once it has handed over the last page (a
// page shorter than the page size): an error reading, ctx's end or a
// panic (I6) is returned instead.
func (s *Streamer) readPages(ctx context.Context, kind kinds.Kind, region string, out chan<- []kinds.Event) error {
	defer close(out)
	after := ""
	return s.guard.Run("full-sync-read", func() error {
		for {
			events, last, err := s.readPage(ctx, kind, region, after)
			if err != nil {
				return err
			}
			if len(events) > 0 {
				select {
				case out <- events:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if len(events) < s.cfg.PageSize {
				return nil
			}
			after = last
		}
	})
}

// readPage reads one page, with one statement (InnoDB reads a statement
// from one snapshot; no transaction stays open), holding one of the
// MaxFullSyncs slots meanwhile. The slot bounds the full syncs reading at
// once; it is never held while the page is sent, so a client that reads
// slowly (or not at all) keeps no other stream from syncing.
func (s *Streamer) readPage(ctx context.Context, kind kinds.Kind, region, after string) ([]kinds.Event, string, error) {
	release, err := s.takeFullSyncSlot(ctx)
	if err != nil {
		return nil, after, err
	}
	defer release()
	return kind.Page(ctx, s.client, region, after, s.cfg.PageSize)
}
