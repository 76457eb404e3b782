package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Config tunes the watcher.
type Config struct {
	Region   string
	Identity string
	// ResyncInterval forces a full sync this often (default 5m; negative
	// turns it off).
	ResyncInterval time.Duration
	// BackoffMin and BackoffMax bound reconnect delays (defaults 1s, 60s);
	// the first delay is jittered between BackoffMin and 5*BackoffMin.
	BackoffMin, BackoffMax time.Duration
	// StatusChanged, if set, is called when a full sync completes or its
	// garbage collection fails, so the agent reports it at once rather than
	// at its next periodic heartbeat. It must not block.
	StatusChanged func()
}

// Present lists the resources with managed objects in the cluster, for
// garbage collection: of every kind it could list, and an error for the
// kinds it could not. Those are not collected this time
// (what is present of them is unknown); the others are.
type Present func() ([]dispatch.Key, error)

// Watcher follows the region's stream.
type Watcher struct {
	client     ctrlv1.ClusterServiceClient
	dispatcher *dispatch.Dispatcher
	present    Present
	cfg        Config
	log        *slog.Logger
	metrics    *metrics.Metrics
	guard      recovery.Guard

	mu           sync.Mutex
	cursor       uint64
	lastFullSync time.Time // last full sync completed, garbage collection included
	synced       bool      // a full sync's events have all been received
	lastErr      error
	gcErr        error     // why the last garbage collection was incomplete
	gcFailures   int       // full syncs in a row whose collection was incomplete
	gcRetry      time.Time // when to redo a full sync for its collection (zero: none due)
	streaming    bool      // a stream is up and has delivered an event
}

// New returns a Watcher.
func New(client ctrlv1.ClusterServiceClient, d *dispatch.Dispatcher, present Present, cfg Config, log *slog.Logger, m *metrics.Metrics) *Watcher {
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = 5 * time.Minute
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = time.Minute
	}
	return &Watcher{client: client, dispatcher: d, present: present, cfg: cfg, log: log, metrics: m,
		guard: recovery.Guard{Log: log, Panics: m.Panics}}
}

// errResync ends a stream to reconnect with cursor 0.
var errResync = errors.New("resync")

// Run follows the stream until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		// A panic while handling the stream (say, in garbage collection)
		// ends that stream like an error the agent cannot handle: logged,
		// counted, and reconnected from the last bookmark after a growing
		// backoff. Events received before it are in the dispatcher, and
		// the cursor only moves on bookmarks handled in full.
		var healthy bool
		err := w.guard.Run("watch", func() (err error) {
			healthy, err = w.stream(ctx)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errResync):
			failures = 0
			continue
		case healthy:
			failures = 0
		}
		w.setErr(err)
		refused := false
		if code := status.Code(err); code == codes.PermissionDenied || code == codes.Unauthenticated {
			failures, refused = 10, true
		}
		failures++
		wait := w.backoff(failures)
		if refused {
			w.log.Error("watch: the token is not accepted for this region; retrying slowly", "err", err, "retry_in", wait)
		} else if err != nil {
			w.log.Warn("watch: stream ended; reconnecting", "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	return nil
}

// backoff is jittered exponential: 1-5x BackoffMin at first, doubling up
// to BackoffMax.
func (w *Watcher) backoff(failures int) time.Duration {
	d := w.cfg.BackoffMin << min(failures-1, 16)
	d += time.Duration(rand.Int64N(int64(4*w.cfg.BackoffMin) + 1))
	return min(d, w.cfg.BackoffMax)
}

// stream runs one stream; healthy reports that ctrld accepted it (or, an
// older ctrld, delivered events) and it did not end on an event the agent
// failed to handle.
func (w *Watcher) stream(ctx context.Context) (healthy bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer w.setStreaming(false)
	w.mu.Lock()
	if w.fullSyncDue() {
		w.cursor = 0
	}
	cursor := w.cursor
	w.mu.Unlock()
	fullSync := cursor == 0
	if fullSync {
		w.dispatcher.BeginFullSync()
	}
	// Checked on a tick, and only between full syncs: the periodic resync
	// counts from the last completed full sync, so a full sync slower than
	// the interval is never cut short. The tick runs with periodic resyncs
	// off too, for the redo of an incomplete garbage collection.
	tick := min(time.Second, w.cfg.BackoffMin)
	if w.cfg.ResyncInterval > 0 {
		tick = min(tick, w.cfg.ResyncInterval)
	}
	resync := time.NewTicker(tick)
	defer resync.Stop()
	s, err := w.client.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{
		Region: w.cfg.Region, VersionLastSeen: cursor, AgentIdentity: w.cfg.Identity,
		// A full sync's pages as a message each: a ctrld older than
		// batches ignores this and sends an event per resource.
		Batches: true,
	})
	if err != nil {
		return false, err
	}
	events := make(chan *ctrlv1.DeploymentChangeEvent)
	accepted := make(chan struct{})
	recvErr := make(chan error, 1)
	go func() {
		// A panic here (a message that does not decode?) ends the stream.
		recvErr <- w.guard.Run("watch-recv", func() error {
			// ctrld sends rpc.AcceptedHeader once it has accepted the
			// stream (before any event, which a paused region may not send
			// for hours). A refused stream ends with no headers at all,
			// which Header does not report as an error.
			header, err := s.Header()
			if err != nil {
				return err
			}
			if len(header.Get(rpc.AcceptedHeader)) > 0 {
				close(accepted)
			}
			for {
				ev, err := s.Recv()
				if err != nil {
					return err
				}
				select {
				case events <- ev:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
	}()
	for {
		select {
		case <-ctx.Done():
			return healthy, ctx.Err()
		case err := <-recvErr:
			return healthy, err
		case <-accepted:
			// Accepted is healthy: a paused region sends nothing for
			// hours, and a stream it ends (ctrld restarting) must not
			// make the next reconnect wait longer each time.
			accepted, healthy = nil, true
			w.connected()
			w.log.Info("watch: streaming from ctrld", "cursor", cursor, "full_sync", fullSync)
		case <-resync.C:
			w.mu.Lock()
			due := !fullSync && w.fullSyncDue()
			w.mu.Unlock()
			if due { // stream() starts the next one over from cursor 0
				return healthy, errResync
			}
		case ev := <-events:
			if !healthy {
				healthy = true
				w.connected() // (an old ctrld sends no accepted header)
			}
			switch err := w.handle(ev, &fullSync); {
			case errors.Is(err, errResync):
				return healthy, err
			case err != nil:
				// The agent cannot handle what ctrld sent (say, an event
				// type from a newer ctrld), and a reconnect will send it
				// again: not a healthy stream, so the backoff grows rather
				// than full-syncing every few seconds forever.
				return false, err
			}
		}
	}
}

// handle passes one event on; an error ends the stream.
func (w *Watcher) handle(ev *ctrlv1.DeploymentChangeEvent, fullSync *bool) error {
	switch e := ev.GetEvent().(type) {
	case *ctrlv1.DeploymentChangeEvent_Bookmark:
		if *fullSync && e.Bookmark.GetFullSyncDone() {
			*fullSync = false
			w.collect()
		}
		if *fullSync {
			// Bookmarks without full_sync_done cannot come mid-sync; if
			// they did, acking them would skip the rest of the sync.
			return nil
		}
		w.mu.Lock()
		w.cursor = max(w.cursor, e.Bookmark.GetResumeVersion())
		w.mu.Unlock()
		w.dispatcher.Bookmark(e.Bookmark.GetResumeVersion())
		w.count("bookmark")
	case *ctrlv1.DeploymentChangeEvent_ResyncRequired:
		w.log.Info("watch: server asks for a full resync", "reason", e.ResyncRequired.GetReason())
		w.resetCursor()
		w.count("resync_required")
		return errResync
	case *ctrlv1.DeploymentChangeEvent_Batch:
		// Each of its events as if it had come alone. It holds no
		// bookmark, so the cursor moves only on the bookmarks after it.
		events, err := rpc.Unbatch(ev)
		if err != nil {
			w.count("invalid")
			return err
		}
		for _, e := range events {
			if err := w.resource(e); err != nil {
				return err
			}
		}
	default:
		return w.resource(ev)
	}
	return nil
}

// resource passes one resource event on to the dispatcher.
func (w *Watcher) resource(ev *ctrlv1.DeploymentChangeEvent) error {
	if err := w.dispatcher.Event(ev); err != nil {
		// Never skipped: the stream ends and resumes from the last
		// bookmark, holding the cursor, until the event is understood.
		w.count("invalid")
		return err
	}
	key, _, _ := dispatch.KeyOf(ev)
	w.count(key.Kind)
	return nil
}

// collect deletes the managed objects the full sync just received did not
// list, of every kind that could be listed, and records the full sync as
// completed only if that was every kind; otherwise it schedules a redo.
func (w *Watcher) collect() {
	present, err := w.present()
	if n := w.dispatcher.Collect(present); n > 0 {
		w.metrics.GCDeletions.Add(float64(n))
		w.log.Info("watch: deleting managed objects the full sync did not list", "count", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.synced = true
	if err != nil {
		// Not completed: lastFullSync stays where it was, so neither the
		// heartbeat nor the metric claims a sync whose deletes may be
		// missing.
		w.gcFailures++
		w.gcErr = fmt.Errorf("garbage collection after the full sync is incomplete: %w", err)
		retry := w.backoff(w.gcFailures)
		w.gcRetry = time.Now().Add(retry)
		w.metrics.GCFailures.Inc()
		w.log.Warn("watch: listing managed objects for garbage collection failed; collected the kinds that listed, redoing the full sync", "err", err, "retry_in", retry)
		w.statusChanged()
		return
	}
	w.metrics.FullSyncs.Inc()
	w.lastFullSync = time.Now()
	w.gcErr, w.gcFailures, w.gcRetry = nil, 0, time.Time{}
	w.statusChanged()
}

func (w *Watcher) statusChanged() {
	if w.cfg.StatusChanged != nil {
		w.cfg.StatusChanged()
	}
}

// fullSyncDue reports whether the next stream should start over with a
// full sync. An incomplete garbage collection is redone on its own
// backoff, whatever the resync interval: counted from the last completed
// full sync, which may be long ago or never, the interval would either
// never fire (resyncs off) or fire on every tick. Called with mu held.
func (w *Watcher) fullSyncDue() bool {
	if !w.gcRetry.IsZero() {
		return time.Now().After(w.gcRetry)
	}
	return w.cfg.ResyncInterval > 0 && time.Since(w.lastFullSync) > w.cfg.ResyncInterval
}

func (w *Watcher) resetCursor() {
	w.mu.Lock()
	w.cursor = 0
	w.mu.Unlock()
}

func (w *Watcher) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

// connected records that a stream is up: the last stream's error is over.
func (w *Watcher) connected() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr, w.streaming = nil, true
}

func (w *Watcher) setStreaming(on bool) {
	w.mu.Lock()
	w.streaming = on
	w.mu.Unlock()
}

func (w *Watcher) count(kind string) {
	w.metrics.EventsReceived.WithLabelValues(kind).Inc()
}

// Cursor is the resume version of the last bookmark received.
func (w *Watcher) Cursor() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cursor
}

// LastFullSync is when the last full sync completed, its garbage
// collection included (zero if none has).
func (w *Watcher) LastFullSync() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastFullSync
}

// LastError is the error the last stream ended with, if any.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// GCError is why the last full sync's garbage collection was incomplete,
// if it was: the full sync is being redone until it is not.
func (w *Watcher) GCError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gcErr
}

// Ready is nil while a stream is up and a full sync has been received since
// the watcher started; otherwise it says what is missing. An incomplete
// garbage collection does not make the agent unready: it applies the
// stream all the same, the failure shows as GCError, and an unready agent
// would only stall the rollout of its own fix (say, its RBAC).
func (w *Watcher) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.streaming && w.lastErr != nil:
		return fmt.Errorf("not streaming from ctrld: %w", w.lastErr)
	case !w.streaming:
		return errors.New("not streaming from ctrld yet")
	case !w.synced:
		return errors.New("first full sync in progress")
	}
	return nil
}
