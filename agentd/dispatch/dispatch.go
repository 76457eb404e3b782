package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Key names one resource: the queue's key is the resource itself, in the
// vocabulary both binaries share (an alias, so watch, status and the agent
// pass rpc.Resource values through without converting them).
type Key = rpc.Resource

// Intent is the latest desired state of one resource.
type Intent struct {
	// Delete is true for deletes; otherwise the state is in Event.
	Delete bool
	// Event is the stream event that carried it (nil for deletes made up
	// by garbage collection).
	Event *ctrlv1.DeploymentChangeEvent
	seq   uint64
	gen   int
}

// Handler applies one resource's intent to the cluster.
type Handler interface {
	Handle(ctx context.Context, key Key, intent Intent) error
}

// ErrUnknownEvent rejects an event the agent does not understand: it is
// never skipped silently.
var ErrUnknownEvent = errors.New("unknown or empty event")

// Terminal marks a handler's error as the final outcome of the intent it
// was handed (as controller-runtime's reconcile.TerminalError does): the
// agent refuses it by a rule of its own, and applying it again cannot
// succeed until a person changes something (a namespace that is not the
// agent's, see kube.ErrForeignNamespace). The dispatcher does not retry
// it, and the intent stops holding the acked cursor, while the resource
// stays failing with that error, reported to ctrld and shown as the
// region's last error until an apply succeeds. The same intent is tried
// again after RefusedRetryMin, then after doubling delays up to
// RefusedRetryMax, while it stays refused (holding nothing meanwhile), so
// that a person's fix takes effect within minutes even with periodic
// resyncs off; a later intent for the resource (its next change, or the
// next full sync, which re-sends every resource) is tried at once, as any
// other.
//
// Why the cursor may pass it: held, one refused resource would stop the
// region's acked cursor for good. Every later change would count as lag,
// resent after each reconnect, retention would delete the rows past the
// cursor until the stream answered resync_required, and the full sync
// after it would be refused the same way: the whole region out of sync
// for one resource that is not the agent's to apply. Passing it loses
// nothing: the acked cursor says how far the stream has been dealt with,
// and the refusal is dealt with, visibly; the resource's report says it
// is not in sync and why.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// IsTerminal reports whether err, or one it wraps, was marked by Terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

type terminalError struct{ err error }

// RefusedRetryMin and RefusedRetryMax bound the delay before a refused
// (Terminal) intent is tried again: long, since only a person's change
// can make it pass, and the retry of one in a namespace that is not the
// agent's reads the namespace from the API server.
const (
	RefusedRetryMin = time.Minute
	RefusedRetryMax = 5 * time.Minute
)

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Dispatcher queues intents and tracks the acknowledged cursor.
type Dispatcher struct {
	handler Handler
	queue   workqueue.TypedRateLimitingInterface[Key]
	// refusedDelay spaces the retries of refused (Terminal) intents, per
	// key, apart from the queue's backoff of failing ones.
	refusedDelay workqueue.TypedRateLimiter[Key]
	log          *slog.Logger
	guard        recovery.Guard // turns a panic while applying a resource into a failed apply

	mu        sync.Mutex
	seq       uint64         // sequence of the last event received
	gen       int            // current full-sync generation
	syncing   bool           // a full sync is being received (until its bookmark)
	desired   map[Key]Intent // latest intent per key
	pending   map[Key]uint64 // keys whose latest intent is not applied yet -> the seq holding bookmarks
	bookmarks []bookmark     // received, not yet acknowledged
	acked     uint64         // resume version of the last acknowledged bookmark
	ackedAny  bool           // a bookmark has been acknowledged: acked is known
	failures  map[Key]failure
	onAck     func(uint64)

	// What ctrld is told about each resource (see Syncs).
	appliedVersion map[Key]uint64 // stream version of the last event applied
	dirty          map[Key]bool   // state may differ from what ctrld last took
	reported       map[Key]Sync   // what ctrld last took (until it took a delete)
}

// failure is a failing key's last error, and since when it has been
// failing.
type failure struct {
	err   error
	since time.Time
}

type bookmark struct {
	seq     uint64 // last event received before it
	version uint64
}

// New returns a dispatcher; onAck is called (outside locks) whenever the
// acknowledged cursor moves.
func New(handler Handler, log *slog.Logger, onAck func(uint64), opts ...Option) *Dispatcher {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[Key](200*time.Millisecond, 2*time.Minute)
	d := &Dispatcher{
		handler:      handler,
		queue:        workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[Key]{Name: "agentd"}),
		refusedDelay: workqueue.NewTypedItemExponentialFailureRateLimiter[Key](RefusedRetryMin, RefusedRetryMax),
		log:          log,
		guard:        recovery.Guard{Log: log},
		desired:      map[Key]Intent{},
		pending:      map[Key]uint64{},
		failures:     map[Key]failure{},
		onAck:        onAck,

		appliedVersion: map[Key]uint64{},
		dirty:          map[Key]bool{},
		reported:       map[Key]Sync{},
	}
	for _, opt := range opts {
		opt(d)
	}
	return d
}

// KeyOf names the resource an event is about (rpc.ResourceOf) and whether
// the event deletes it; an event about no resource, one without an ID and
// one with an unknown action are ErrUnknownEvent.
func KeyOf(ev *ctrlv1.DeploymentChangeEvent) (Key, bool, error) {
	key, action, ok := rpc.ResourceOf(ev)
	if !ok {
		return Key{}, false, fmt.Errorf("%w: %T", ErrUnknownEvent, ev.GetEvent())
	}
	if key.ID == "" {
		return Key{}, false, fmt.Errorf("%w: %s event without an id", ErrUnknownEvent, key.Kind)
	}
	switch action {
	case ctrlv1.Action_ACTION_APPLY:
		return key, false, nil
	case ctrlv1.Action_ACTION_DELETE:
		return key, true, nil
	}
	return Key{}, false, fmt.Errorf("%w: %s %s with action %v", ErrUnknownEvent, key.Kind, key.ID, action)
}

// Event queues a resource event. Nil and unknown events are errors.
func (d *Dispatcher) Event(ev *ctrlv1.DeploymentChangeEvent) error {
	key, del, err := KeyOf(ev)
	if err != nil {
		return err
	}
	d.enqueue(key, Intent{Delete: del, Event: ev})
	return nil
}

func (d *Dispatcher) enqueue(key Key, in Intent) {
	d.record(key, in)
	d.queue.Add(key)
}

// record makes in key's latest intent.
func (d *Dispatcher) record(key Key, in Intent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	in.seq, in.gen = d.seq, d.gen
	d.desired[key] = in
	d.dirty[key] = true // not in sync until applied
	if _, held := d.pending[key]; !held || !d.syncing {
		d.pending[key] = in.seq
	}
}

// Bookmark records that every event before it was received; its version
// becomes the acknowledged cursor once they are all applied.
func (d *Dispatcher) Bookmark(version uint64) {
	if acked, moved := d.bookmark(version); moved && d.onAck != nil {
		d.onAck(acked)
	}
}

// bookmark records a bookmark; it returns the acknowledged cursor and
// whether it moved.
func (d *Dispatcher) bookmark(version uint64) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncing = false // no bookmark is passed on before a full sync's last
	if n := len(d.bookmarks); n > 0 && d.bookmarks[n-1].seq == d.seq {
		// No event since the last one: it stands for both (keep-alives and
		// watermark moves would otherwise pile up behind a stuck apply).
		d.bookmarks[n-1].version = max(d.bookmarks[n-1].version, version)
	} else {
		d.bookmarks = append(d.bookmarks, bookmark{seq: d.seq, version: version})
	}
	moved := d.advance()
	return d.acked, moved
}

// BeginFullSync starts a new generation: what the coming full sync lists
// is what the cluster should hold. The next Bookmark must be the full
// sync's last (full_sync_done): it ends the sync.
func (d *Dispatcher) BeginFullSync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	d.syncing = true
}

// Collect deletes (through the queue) every resource the current full
// sync did not list and no event since asked to keep: those present in the
// cluster, and those still waiting in the queue from before the sync (an
// apply queued or retrying when the resource was deleted upstream must not
// run after all). A listed resource is kept by kind and ID alone: the full
// sync applied it again, and its apply removes whatever it left elsewhere
// (identity is whole, invariant I7). Garbage collection after
// full_sync_done; it returns how many resources it deletes.
func (d *Dispatcher) Collect(present []Key) int {
	stale := d.stale(present)
	for k := range stale {
		d.enqueue(k, Intent{Delete: true})
	}
	return len(stale)
}

// stale is Collect's choice of resources to delete.
func (d *Dispatcher) stale(present []Key) map[Key]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	stale := map[Key]bool{}
	for _, k := range present {
		if in, ok := d.desired[k]; !ok || in.gen != d.gen || in.Delete {
			stale[k] = true
		}
	}
	for k, in := range d.desired {
		if in.gen != d.gen && !in.Delete {
			stale[k] = true
		}
	}
	return stale
}

// Requeue applies a resource's latest intent again, e.g. after its objects
// were edited or deleted out of band. When only is set, only if only
// accepts that intent: an object that just appeared re-applies its
// resource only when the intent puts the resource's objects elsewhere
// (the object was left behind by a move whose apply ran before the
// informer cache held it).
func (d *Dispatcher) Requeue(key Key, only func(Intent) bool) {
	if d.wants(key, only) {
		d.queue.Add(key)
	}
}

// wants reports whether key has an intent that only accepts (any intent
// when only is nil). only runs under the lock, so it judges the latest
// intent; the deferred unlock outlives a panic in it.
func (d *Dispatcher) wants(key Key, only func(Intent) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	in, ok := d.desired[key]
	return ok && (only == nil || only(in))
}

// Acked returns the acknowledged cursor.
func (d *Dispatcher) Acked() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked
}

// HasAcked reports whether a bookmark has been acknowledged yet. Until
// then Acked's 0 means "not known", not "nothing applied".
func (d *Dispatcher) HasAcked() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ackedAny
}

// Depth is the number of resources waiting to be applied.
func (d *Dispatcher) Depth() int { return d.queue.Len() }

// LastError describes the resource that has been failing longest, if any:
// the same one on every call while it keeps failing, so the console does
// not flip between errors.
func (d *Dispatcher) LastError() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var key Key
	var oldest failure
	for k, f := range d.failures {
		if oldest.err == nil || f.since.Before(oldest.since) || f.since.Equal(oldest.since) && k.String() < key.String() {
			key, oldest = k, f
		}
	}
	if oldest.err == nil {
		return ""
	}
	return fmt.Sprintf("%s: %v", key, oldest.err)
}

// advance acknowledges bookmarks whose events are all applied. Called
// with mu held; reports whether acked moved.
//
// It is called after every apply, so it looks no further than it must:
// with no bookmark waiting there is nothing to do, and the first pending
// event at or before the first bookmark holds every bookmark. A full sync
// queues thousands of events before its bookmark, and a scan of them all
// after each apply cost a no-op resync of 10,000 deployments more CPU
// than its applies.
func (d *Dispatcher) advance() bool {
	if len(d.bookmarks) == 0 {
		return false
	}
	oldest := ^uint64(0)
	for _, seq := range d.pending {
		if seq <= d.bookmarks[0].seq {
			return false
		}
		oldest = min(oldest, seq)
	}
	moved := false
	for len(d.bookmarks) > 0 && d.bookmarks[0].seq < oldest {
		// The first acknowledgement counts as a move even at version 0:
		// the cursor went from unknown to known.
		if v := d.bookmarks[0].version; v > d.acked || !d.ackedAny {
			d.acked, d.ackedAny, moved = v, true, true
		}
		d.bookmarks = d.bookmarks[1:]
	}
	return moved
}

// Run applies queued resources with workers goroutines until ctx ends.
func (d *Dispatcher) Run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		d.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for d.work(ctx) {
			}
		})
	}
	wg.Wait()
}

// work applies one queued resource; it reports false once the queue is
// shut down. A panic on the way, in the handler or in the dispatcher's own
// code, is one failed apply of that resource: logged with its stack,
// counted, and retried with backoff like any other failure (it shows as
// the agent's last error meanwhile), while the worker goes on with other
// resources. Every lock is released by then (each is taken in a small
// method that defers its unlock), and the retry keeps the resource's
// pending entry from holding the cursor for good.
func (d *Dispatcher) work(ctx context.Context) bool {
	key, shutdown := d.queue.Get()
	if shutdown {
		return false
	}
	defer d.queue.Done(key)
	if err := d.guard.Run("dispatch", func() error { return d.apply(ctx, key) }); err != nil {
		d.retry(ctx, key, err)
	}
	return true
}

// apply hands key's latest intent to the handler and, if it succeeds,
// records it as applied; if the handler refuses it for good (Terminal),
// records that, and it is not retried.
func (d *Dispatcher) apply(ctx context.Context, key Key) error {
	in, ok := d.intent(key)
	if !ok {
		d.queue.Forget(key)
		return nil
	}
	var acked uint64
	var moved bool
	switch err := d.handler.Handle(ctx, key, in); {
	case IsTerminal(err):
		var latest bool
		acked, moved, latest = d.refused(key, in, err)
		if !latest {
			// A newer intent came meanwhile and is queued already: it is
			// tried next, with no backoff of this one's.
			d.refusedDelay.Forget(key)
			d.log.Warn("apply refused; a newer intent of the resource is tried next", "resource", key.String(), "err", err)
			break
		}
		// Tried again much later, holding nothing meanwhile: the queue
		// hands out its latest intent then (none, if it was deleted).
		delay := d.refusedDelay.When(key)
		d.queue.AddAfter(key, delay)
		d.log.Warn("apply refused; the resource stays failing, and reported, until an apply of it succeeds; trying it again later",
			"resource", key.String(), "err", err, "retry_in", delay)
	case err != nil:
		return err
	default:
		d.refusedDelay.Forget(key)
		acked, moved = d.applied(key, in)
	}
	d.queue.Forget(key)
	if moved && d.onAck != nil {
		d.onAck(acked)
	}
	return nil
}

func (d *Dispatcher) intent(key Key) (Intent, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	in, ok := d.desired[key]
	return in, ok
}

// applied records that in, key's intent, was applied; it returns the
// acknowledged cursor and whether it moved.
func (d *Dispatcher) applied(key Key, in Intent) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.failures, key)
	d.dirty[key] = true
	if in.Event != nil { // garbage collection's deletes carry no version
		d.appliedVersion[key] = in.Event.GetVersion()
	}
	if d.desired[key].seq == in.seq {
		// The latest intent is applied: whatever seq it held bookmarks
		// with (its own, or an older one's during a full sync), it is done.
		delete(d.pending, key)
		if in.Delete {
			// Nothing left to keep for it; its report says deleted.
			delete(d.desired, key)
			delete(d.appliedVersion, key)
		}
	}
	moved := d.advance()
	return d.acked, moved
}

// refused records that in, key's intent, was refused for good (see
// Terminal): the resource is failing with err, and the intent no longer
// holds bookmarks. It returns the acknowledged cursor, whether it moved,
// and whether in is still key's latest intent.
func (d *Dispatcher) refused(key Key, in Intent, err error) (acked uint64, moved, latest bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail(key, err)
	latest = d.desired[key].seq == in.seq
	if latest {
		// Dealt with, as an apply would be (see applied); a newer intent
		// received meanwhile holds its own place and is applied next.
		delete(d.pending, key)
	}
	moved = d.advance()
	return d.acked, moved, latest
}

// retry records key's failed apply and queues it again with backoff.
func (d *Dispatcher) retry(ctx context.Context, key Key, err error) {
	d.failed(key, err)
	if ctx.Err() == nil {
		d.log.Warn("apply failed; retrying with backoff", "resource", key.String(), "err", err)
		d.queue.AddRateLimited(key)
	}
}

func (d *Dispatcher) failed(key Key, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail(key, err)
}

// fail records err as key's failure. Called with mu held.
func (d *Dispatcher) fail(key Key, err error) {
	f, failing := d.failures[key]
	if !failing {
		f.since = time.Now()
	}
	f.err = err
	d.failures[key] = f
	d.dirty[key] = true
}
