// Package watch keeps one WatchDeploymentChanges stream open for the
// agent's region and feeds it to the dispatcher.
//
// It starts with cursor 0 (a full sync) and afterwards resumes from the
// last bookmark received: events before that bookmark sit in the
// dispatcher until applied, so nothing is lost by resuming past work that
// is still queued. After a full sync's full_sync_done bookmark it garbage
// collects managed objects the sync did not list. It does a full resync
// every ResyncInterval as a safety net, at once when the server sends
// resync_required, and reconnects after any stream end with jittered
// exponential backoff. A paused region simply sends nothing.
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
}

// Present lists the managed resources in the cluster, for garbage
// collection.
type Present func() ([]dispatch.Key, error)

// Watcher follows the region's stream.
type Watcher struct {
	client     ctrlv1.ClusterServiceClient
	dispatcher *dispatch.Dispatcher
	present    Present
	cfg        Config
	log        *slog.Logger
	metrics    *metrics.Metrics

	mu           sync.Mutex
	cursor       uint64
	lastFullSync time.Time
	lastErr      error
	streaming    bool // a stream is up and has delivered an event
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
	return &Watcher{client: client, dispatcher: d, present: present, cfg: cfg, log: log, metrics: m}
}

// errResync ends a stream to reconnect with cursor 0.
var errResync = errors.New("resync")

// Run follows the stream until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		healthy, err := w.stream(ctx)
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
		if code := status.Code(err); code == codes.PermissionDenied || code == codes.Unauthenticated {
			w.log.Error("watch: the token is not accepted for this region; retrying slowly", "err", err)
			failures = 10
		} else if err != nil {
			w.log.Warn("watch: stream ended; reconnecting", "err", err)
		}
		failures++
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.backoff(failures)):
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

// stream runs one stream; healthy reports that it delivered events and
// did not end on one the agent failed to handle.
func (w *Watcher) stream(ctx context.Context) (healthy bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer w.setStreaming(false)
	w.mu.Lock()
	if w.cfg.ResyncInterval > 0 && time.Since(w.lastFullSync) > w.cfg.ResyncInterval {
		w.cursor = 0
	}
	cursor := w.cursor
	w.mu.Unlock()
	fullSync := cursor == 0
	if fullSync {
		w.dispatcher.BeginFullSync()
	}
	// The periodic resync counts from the last completed full sync, so a
	// full sync slower than the interval is never cut short.
	var resync <-chan time.Time
	if w.cfg.ResyncInterval > 0 {
		t := time.NewTicker(min(w.cfg.ResyncInterval, time.Second))
		defer t.Stop()
		resync = t.C
	}
	s, err := w.client.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{
		Region: w.cfg.Region, VersionLastSeen: cursor, AgentIdentity: w.cfg.Identity,
	})
	if err != nil {
		return false, err
	}
	events := make(chan *ctrlv1.DeploymentChangeEvent)
	recvErr := make(chan error, 1)
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return healthy, ctx.Err()
		case err := <-recvErr:
			return healthy, err
		case <-resync:
			if !fullSync && time.Since(w.LastFullSync()) > w.cfg.ResyncInterval {
				w.resetCursor()
				return healthy, errResync
			}
		case ev := <-events:
			if !healthy {
				healthy = true
				w.setErr(nil) // connected and streaming: no error to show
				w.setStreaming(true)
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
			w.metrics.FullSyncs.Inc()
			w.collect()
			w.mu.Lock()
			w.lastFullSync = time.Now()
			w.mu.Unlock()
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
	default:
		if err := w.dispatcher.Event(ev); err != nil {
			// Never skipped: the stream ends and resumes from the last
			// bookmark, holding the cursor, until the event is understood.
			w.count("invalid")
			return err
		}
		key, _, _ := dispatch.KeyOf(ev)
		w.count(key.Kind)
	}
	return nil
}

func (w *Watcher) collect() {
	present, err := w.present()
	if err != nil {
		w.log.Warn("watch: listing managed objects for garbage collection failed; the next full sync retries", "err", err)
		return
	}
	if n := w.dispatcher.Collect(present); n > 0 {
		w.metrics.GCDeletions.Add(float64(n))
		w.log.Info("watch: deleting managed objects the full sync did not list", "count", n)
	}
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

// LastFullSync is when the last full sync completed.
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

// Ready is nil while a stream is up and a full sync has completed since the
// watcher started; otherwise it says what is missing.
func (w *Watcher) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.streaming && w.lastErr != nil:
		return fmt.Errorf("not streaming from ctrld: %w", w.lastErr)
	case !w.streaming:
		return errors.New("not streaming from ctrld yet")
	case w.lastFullSync.IsZero():
		return errors.New("first full sync in progress")
	}
	return nil
}
