// Package dispatch applies stream events through a per-resource work
// queue and decides how far the agent's cursor may advance.
//
// Events are keyed by resource (kind and ID). Only the latest intent per
// key is kept, and client-go's work queue never hands one key to two
// workers at once: an Apply followed quickly by a Delete of the same
// deployment can only end deleted, and no two applies of one resource race.
// Different resources are applied in parallel by a bounded set of workers.
//
// The cursor is acknowledged only past work that is done: a bookmark from
// the stream counts once every event received before it has been applied
// successfully or superseded by a later event for the same resource. A
// superseded event stops holding bookmarks as soon as the later one is
// received, applied or not: the later event comes after those bookmarks in
// the stream, so a resume from any of them receives it again. Not so
// during a full sync: it re-sends every resource whatever its version, so
// an event it sends for a resource does not release the bookmarks before
// the sync that the resource's unapplied event holds; they wait for that
// resource's apply (which the sync's own bookmark waits for anyway). A
// failing apply is retried with the queue's exponential backoff and holds
// the cursor meanwhile; other resources go on.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Kinds of resource.
const (
	KindDeployment = "deployment"
	KindSentinel   = "sentinel"
	KindPolicy     = "cilium_network_policy"
)

// Key names one resource.
type Key struct {
	Kind string
	ID   string
}

func (k Key) String() string { return k.Kind + "/" + k.ID }

// Object is a managed object found in the cluster: the resource it belongs
// to (by its ID label) and where it is. A resource's identity is whole
// (invariant I7): an object of a listed resource is kept only where the
// resource's apply puts its objects.
type Object struct {
	Key       Key
	Namespace string
	Name      string
}

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

// places reports whether in is an apply that puts its resource's objects
// where o is: the event's namespace, under the name the objects take
// (deployments' are named by their ID, sentinels' by naming.Sentinel,
// policies' by the user).
func (in Intent) places(o Object) bool {
	if in.Delete {
		return false
	}
	var ns, name string
	switch e := in.Event.GetEvent().(type) {
	case *ctrlv1.DeploymentChangeEvent_Deployment:
		s := e.Deployment.GetDeployment()
		ns, name = s.GetNamespace(), s.GetDeploymentId()
	case *ctrlv1.DeploymentChangeEvent_Sentinel:
		s := e.Sentinel.GetSentinel()
		ns, name = s.GetNamespace(), naming.Sentinel(s.GetSentinelId())
	case *ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy:
		p := e.CiliumNetworkPolicy.GetCiliumNetworkPolicy()
		ns, name = p.GetNamespace(), p.GetName()
	default:
		return false
	}
	return o.Namespace == ns && o.Name == name
}

// Handler applies one resource's intent to the cluster.
type Handler interface {
	Handle(ctx context.Context, key Key, intent Intent) error
}

// ErrUnknownEvent rejects an event the agent does not understand: it is
// never skipped silently.
var ErrUnknownEvent = errors.New("unknown or empty event")

// Dispatcher queues intents and tracks the acknowledged cursor.
type Dispatcher struct {
	handler Handler
	queue   workqueue.TypedRateLimitingInterface[Key]
	log     *slog.Logger
	guard   recovery.Guard // turns a panic in handler into a failed apply

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
		handler:  handler,
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[Key]{Name: "agentd"}),
		log:      log,
		guard:    recovery.Guard{Log: log},
		desired:  map[Key]Intent{},
		pending:  map[Key]uint64{},
		failures: map[Key]failure{},
		onAck:    onAck,
	}
	for _, opt := range opts {
		opt(d)
	}
	return d
}

// KeyOf names the resource an event is about.
func KeyOf(ev *ctrlv1.DeploymentChangeEvent) (Key, bool, error) {
	switch e := ev.GetEvent().(type) {
	case *ctrlv1.DeploymentChangeEvent_Deployment:
		return keyWith(KindDeployment, e.Deployment.GetDeployment().GetDeploymentId(), e.Deployment.GetAction())
	case *ctrlv1.DeploymentChangeEvent_Sentinel:
		return keyWith(KindSentinel, e.Sentinel.GetSentinel().GetSentinelId(), e.Sentinel.GetAction())
	case *ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy:
		return keyWith(KindPolicy, e.CiliumNetworkPolicy.GetCiliumNetworkPolicy().GetPolicyId(), e.CiliumNetworkPolicy.GetAction())
	}
	return Key{}, false, fmt.Errorf("%w: %T", ErrUnknownEvent, ev.GetEvent())
}

func keyWith(kind, id string, action ctrlv1.Action) (Key, bool, error) {
	if id == "" {
		return Key{}, false, fmt.Errorf("%w: %s event without an id", ErrUnknownEvent, kind)
	}
	switch action {
	case ctrlv1.Action_ACTION_APPLY:
		return Key{kind, id}, false, nil
	case ctrlv1.Action_ACTION_DELETE:
		return Key{kind, id}, true, nil
	}
	return Key{}, false, fmt.Errorf("%w: %s %s with action %v", ErrUnknownEvent, kind, id, action)
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
	d.mu.Lock()
	d.seq++
	in.seq, in.gen = d.seq, d.gen
	d.desired[key] = in
	if _, held := d.pending[key]; !held || !d.syncing {
		d.pending[key] = in.seq
	}
	d.mu.Unlock()
	d.queue.Add(key)
}

// Bookmark records that every event before it was received; its version
// becomes the acknowledged cursor once they are all applied.
func (d *Dispatcher) Bookmark(version uint64) {
	d.mu.Lock()
	d.syncing = false // no bookmark is passed on before a full sync's last
	if n := len(d.bookmarks); n > 0 && d.bookmarks[n-1].seq == d.seq {
		// No event since the last one: it stands for both (keep-alives and
		// watermark moves would otherwise pile up behind a stuck apply).
		d.bookmarks[n-1].version = max(d.bookmarks[n-1].version, version)
	} else {
		d.bookmarks = append(d.bookmarks, bookmark{seq: d.seq, version: version})
	}
	moved := d.advance()
	acked := d.acked
	d.mu.Unlock()
	if moved && d.onAck != nil {
		d.onAck(acked)
	}
}

// BeginFullSync starts a new generation: what the coming full sync lists
// is what the cluster should hold. The next Bookmark must be the full
// sync's last (full_sync_done): it ends the sync.
func (d *Dispatcher) BeginFullSync() {
	d.mu.Lock()
	d.gen++
	d.syncing = true
	d.mu.Unlock()
}

// Collect deletes (through the queue) every resource the current full
// sync did not list and no event since asked to keep: those present in the
// cluster, and those still waiting in the queue from before the sync (an
// apply queued or retrying when the resource was deleted upstream must not
// run after all). A listed resource with objects somewhere else than the
// sync puts it (deleted and deployed again under its ID in another
// namespace while the agent missed the delete) is applied again: the apply
// removes what it left behind, in the resource's turn on the queue, so it
// never races the resource's own events. Garbage collection after
// full_sync_done; it returns how many resources it acted on.
func (d *Dispatcher) Collect(present []Object) int {
	stale, moved := map[Key]bool{}, map[Key]bool{}
	d.mu.Lock()
	for _, o := range present {
		in, ok := d.desired[o.Key]
		switch {
		case !ok || in.gen != d.gen || in.Delete:
			stale[o.Key] = true
		case !in.places(o):
			moved[o.Key] = true
		}
	}
	for k, in := range d.desired {
		if in.gen != d.gen && !in.Delete {
			stale[k] = true
		}
	}
	d.mu.Unlock()
	for k := range stale {
		d.enqueue(k, Intent{Delete: true})
	}
	for k := range moved {
		d.queue.Add(k)
	}
	return len(stale) + len(moved)
}

// Found re-applies the resource of an object that just appeared in the
// cluster when its latest intent is an apply that puts its objects
// elsewhere. An apply finds what a move left behind in the informer
// cache, which may not yet hold an object created just before the move;
// this catches it when it arrives.
func (d *Dispatcher) Found(o Object) {
	d.mu.Lock()
	in, ok := d.desired[o.Key]
	d.mu.Unlock()
	if ok && !in.Delete && !in.places(o) {
		d.queue.Add(o.Key)
	}
}

// Requeue re-applies a resource's latest intent, e.g. after its objects
// were edited or deleted out of band.
func (d *Dispatcher) Requeue(key Key) {
	d.mu.Lock()
	_, ok := d.desired[key]
	d.mu.Unlock()
	if ok {
		d.queue.Add(key)
	}
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
func (d *Dispatcher) advance() bool {
	oldest := ^uint64(0)
	for _, seq := range d.pending {
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
			// The handler's panics are failed applies (handle); this is
			// for the dispatcher's own, which end only the item at hand.
			for more := true; more; {
				d.guard.Run("dispatch-worker", func() error { more = d.work(ctx); return nil })
			}
		})
	}
	wg.Wait()
}

func (d *Dispatcher) work(ctx context.Context) bool {
	key, shutdown := d.queue.Get()
	if shutdown {
		return false
	}
	defer d.queue.Done(key)
	d.mu.Lock()
	in, ok := d.desired[key]
	d.mu.Unlock()
	if !ok {
		d.queue.Forget(key)
		return true
	}
	err := d.handle(ctx, key, in)
	d.mu.Lock()
	if err != nil {
		f, failing := d.failures[key]
		if !failing {
			f.since = time.Now()
		}
		f.err = err
		d.failures[key] = f
		d.mu.Unlock()
		if ctx.Err() == nil {
			d.log.Warn("apply failed; retrying with backoff", "resource", key.String(), "err", err)
			d.queue.AddRateLimited(key)
		}
		return true
	}
	delete(d.failures, key)
	if d.desired[key].seq == in.seq {
		// The latest intent is applied: whatever seq it held bookmarks
		// with (its own, or an older one's during a full sync), it is done.
		delete(d.pending, key)
	}
	if in.Delete && d.desired[key].seq == in.seq {
		delete(d.desired, key) // nothing left to keep for it
	}
	moved := d.advance()
	acked := d.acked
	d.mu.Unlock()
	d.queue.Forget(key)
	if moved && d.onAck != nil {
		d.onAck(acked)
	}
	return true
}
