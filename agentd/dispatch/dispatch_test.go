package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// recorder is a fake cluster: it records what each key ended as, fails
// keys on demand, and detects two workers on one key at once.
type recorder struct {
	mu       sync.Mutex
	final    map[Key]bool // true = applied, false = deleted
	busy     map[Key]bool
	failLeft map[Key]int
	refuse   map[Key]bool // refused for good (Terminal) while set
	overlap  atomic.Bool
	calls    atomic.Int64
	handled  []Key // in order
}

func (r *recorder) Handle(ctx context.Context, key Key, in Intent) error {
	r.mu.Lock()
	if r.busy[key] {
		r.overlap.Store(true)
	}
	r.busy[key] = true
	r.mu.Unlock()
	r.calls.Add(1)
	time.Sleep(time.Millisecond) // widen any race window
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[key] = false
	r.handled = append(r.handled, key)
	if r.failLeft[key] > 0 {
		r.failLeft[key]--
		return errors.New("injected failure")
	}
	if r.refuse[key] {
		return fmt.Errorf("apply %s: %w", key, Terminal(errors.New("injected refusal")))
	}
	r.final[key] = !in.Delete
	return nil
}

func newRecorder() *recorder {
	return &recorder{final: map[Key]bool{}, busy: map[Key]bool{}, failLeft: map[Key]int{}, refuse: map[Key]bool{}}
}

func deployment(id string, action ctrlv1.Action) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: action, Deployment: &ctrlv1.DeploymentState{DeploymentId: id}},
	}}
}

func start(t *testing.T, d *Dispatcher, workers int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, workers) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Apply then Delete of the same deployment in quick succession ends
// deleted, every time, and one resource is never handled by two workers.
func TestApplyThenDeleteEndsDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for round := range 200 {
			r := newRecorder()
			d := New(r, slog.New(slog.DiscardHandler), nil)
			start(t, d, 8)
			id := fmt.Sprintf("d%d", round)
			must(t, d.Event(deployment(id, ctrlv1.Action_ACTION_APPLY)))
			must(t, d.Event(deployment(id, ctrlv1.Action_ACTION_DELETE)))
			d.Bookmark(1)
			eventually.True(t, 5*time.Second, "bookmark never acknowledged", func() bool { return d.Acked() == 1 })
			r.mu.Lock()
			applied, seen := r.final[Key{Kind: rpc.KindDeployment, ID: id}]
			r.mu.Unlock()
			if !seen || applied {
				t.Fatalf("round %d: deployment ended applied=%v seen=%v, want deleted", round, applied, seen)
			}
			if r.overlap.Load() {
				t.Fatal("one resource was handled by two workers at once")
			}
		}
	})
}

// A failing apply holds the cursor (and is retried); other resources go
// on meanwhile.
func TestFailingApplyHoldsTheCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		bad := Key{Kind: rpc.KindDeployment, ID: "bad"}
		r.failLeft[bad] = 3
		var acks []uint64
		var mu sync.Mutex
		d := New(r, slog.New(slog.DiscardHandler), func(v uint64) { mu.Lock(); acks = append(acks, v); mu.Unlock() })
		start(t, d, 4)

		must(t, d.Event(deployment("good-1", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(10)
		eventually.True(t, 5*time.Second, "first bookmark not acked", func() bool { return d.Acked() == 10 })
		must(t, d.Event(deployment("bad", ctrlv1.Action_ACTION_APPLY)))
		must(t, d.Event(deployment("good-2", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(20)
		eventually.True(t, 5*time.Second, "other resources blocked", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.final[Key{Kind: rpc.KindDeployment, ID: "good-2"}]
		})
		// bad's first attempt may still be running on another worker.
		eventually.True(t, 5*time.Second, "the failing apply is not reported", func() bool { return d.LastError() != "" })
		if d.Acked() != 10 {
			t.Fatalf("cursor advanced to %d past a failing apply (last error %q)", d.Acked(), d.LastError())
		}
		eventually.True(t, 5*time.Second, "cursor never advanced after the retry succeeded", func() bool { return d.Acked() == 20 })
		if d.LastError() != "" {
			t.Fatalf("error not cleared: %s", d.LastError())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(acks) != 2 || acks[0] != 10 || acks[1] != 20 {
			t.Fatalf("acks %v", acks)
		}
	})
}

// An apply refused for good (Terminal, wrapped or not) is not retried and
// does not hold the cursor, while the resource stays failing with its
// error, not in sync, until a later intent for it applies.
func TestARefusedApplyLetsTheCursorPassAndStaysFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		refused := Key{Kind: rpc.KindDeployment, ID: "refused"}
		r.refuse[refused] = true
		d := New(r, slog.New(slog.DiscardHandler), nil)
		start(t, d, 2)
		must(t, d.Event(deployment("refused", ctrlv1.Action_ACTION_APPLY)))
		must(t, d.Event(deployment("fine", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(10)
		eventually.True(t, 5*time.Second, "the cursor is held by a refused apply", func() bool { return d.Acked() == 10 })
		handled := func() int {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(slices.DeleteFunc(slices.Clone(r.handled), func(k Key) bool { return k != refused }))
		}
		// Just short of RefusedRetryMin, on the bubble's clock: the queue's
		// backoff (200 ms, doubling) would have retried it 8 times by now.
		time.Sleep(RefusedRetryMin - time.Second)
		if n := handled(); n != 1 {
			t.Errorf("the refused apply was handled %d times, want once (not retried)", n)
		}
		if got := d.LastError(); !strings.Contains(got, "injected refusal") {
			t.Errorf("last error %q, want the refusal", got)
		}
		syncOf := func(k Key) Sync {
			for _, s := range d.Syncs() {
				if s.Key == k {
					return s
				}
			}
			t.Fatalf("%s not in the report", k)
			return Sync{}
		}
		if s := syncOf(refused); s.InSync || !strings.Contains(s.Err, "injected refusal") || s.FailingSince.IsZero() || s.Deleted {
			t.Errorf("refused resource reported as %+v, want not in sync, failing with the refusal", s)
		}

		// Allowed again (say, its namespace was labeled for the agent): the
		// next intent, a full sync's, applies and clears the error.
		r.mu.Lock()
		r.refuse[refused] = false
		r.mu.Unlock()
		must(t, d.Event(deployment("refused", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(20)
		eventually.True(t, 5*time.Second, "the cursor did not pass the applied intent", func() bool { return d.Acked() == 20 })
		if s := syncOf(refused); !s.InSync || s.Err != "" {
			t.Errorf("applied resource reported as %+v, want in sync without an error", s)
		}
	})
}

// A refused apply is tried again after a long delay, backing off, while
// the cursor has moved on: once allowed (its namespace labeled for the
// agent, say), the resource applies and clears its error without a new
// event, with periodic resyncs off too.
func TestARefusedApplyIsTriedAgainLaterWithoutHoldingTheCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		refused := Key{Kind: rpc.KindDeployment, ID: "refused"}
		r.refuse[refused] = true
		d := New(r, slog.New(slog.DiscardHandler), nil, WithRefusedRetry(20*time.Millisecond, 80*time.Millisecond))
		start(t, d, 2)
		must(t, d.Event(deployment("refused", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(10)
		eventually.True(t, 5*time.Second, "the cursor is held by a refused apply", func() bool { return d.Acked() == 10 })
		handled := func() int {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(slices.DeleteFunc(slices.Clone(r.handled), func(k Key) bool { return k != refused }))
		}
		eventually.True(t, 5*time.Second, "the refused apply was never tried again", func() bool { return handled() >= 3 })
		if d.Acked() != 10 || !strings.Contains(d.LastError(), "injected refusal") {
			t.Errorf("acked %d, last error %q: want the cursor past the refusal, still failing", d.Acked(), d.LastError())
		}
		must(t, d.Event(deployment("other", ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(20)
		eventually.True(t, 5*time.Second, "the cursor is held while the refused apply is retried", func() bool { return d.Acked() == 20 })

		r.mu.Lock()
		r.refuse[refused] = false
		r.mu.Unlock()
		eventually.True(t, 5*time.Second, "the resource allowed again was never applied", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.final[refused]
		})
		eventually.True(t, 5*time.Second, "the refusal was not cleared", func() bool { return d.LastError() == "" })
		n := handled()
		time.Sleep(200 * time.Millisecond) // past the longest delay
		if handled() != n {
			t.Errorf("the resource applied was tried again (%d times, then %d)", n, handled())
		}
	})
}

// With several resources failing, the error reported is always the one
// failing longest, not whichever the map yields first.
func TestLastErrorIsTheLongestFailing(t *testing.T) {
	r := newRecorder()
	first, second := Key{Kind: rpc.KindDeployment, ID: "z-first"}, Key{Kind: rpc.KindDeployment, ID: "a-second"}
	r.failLeft[first], r.failLeft[second] = 1000, 1000
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 2)
	must(t, d.Event(deployment(first.ID, ctrlv1.Action_ACTION_APPLY)))
	eventually.True(t, 5*time.Second, "first failure not reported", func() bool { return d.LastError() != "" })
	must(t, d.Event(deployment(second.ID, ctrlv1.Action_ACTION_APPLY)))
	eventually.True(t, 5*time.Second, "second failure not recorded", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return len(d.failures) == 2 })
	for range 100 {
		if got := d.LastError(); !strings.HasPrefix(got, first.String()+":") {
			t.Fatalf("last error %q, want %s's", got, first)
		}
	}
}

func TestNilAndUnknownEventsAreErrors(t *testing.T) {
	d := New(newRecorder(), slog.New(slog.DiscardHandler), nil)
	for name, ev := range map[string]*ctrlv1.DeploymentChangeEvent{
		"nil":                nil,
		"empty":              {},
		"no id":              deployment("", ctrlv1.Action_ACTION_APPLY),
		"unspecified action": deployment("x", ctrlv1.Action_ACTION_UNSPECIFIED),
	} {
		if err := d.Event(ev); !errors.Is(err, ErrUnknownEvent) {
			t.Errorf("%s: got %v, want ErrUnknownEvent", name, err)
		}
	}
}

// After a full sync, exactly the present resources it did not list (and
// nothing applied since) are deleted.
func TestCollectDeletesWhatTheFullSyncDidNotList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		d := New(r, slog.New(slog.DiscardHandler), nil)
		start(t, d, 2)
		must(t, d.Event(deployment("old", ctrlv1.Action_ACTION_APPLY)))
		// Queued before the sync and failing: deleted upstream meanwhile, so
		// the sync does not list it and it must not be applied late.
		r.mu.Lock()
		r.failLeft[Key{Kind: rpc.KindDeployment, ID: "stuck"}] = 2
		r.mu.Unlock()
		must(t, d.Event(deployment("stuck", ctrlv1.Action_ACTION_APPLY)))
		d.BeginFullSync()
		must(t, d.Event(deployment("kept", ctrlv1.Action_ACTION_APPLY)))
		n := d.Collect([]Key{{Kind: rpc.KindDeployment, ID: "old"}, {Kind: rpc.KindDeployment, ID: "kept"}, {Kind: rpc.KindDeployment, ID: "orphan"}})
		if n != 3 {
			t.Fatalf("collected %d, want old, orphan and stuck", n)
		}
		eventually.True(t, 5*time.Second, "garbage collection did not delete exactly old, orphan and stuck", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			old, o1 := r.final[Key{Kind: rpc.KindDeployment, ID: "old"}]
			orphan, o2 := r.final[Key{Kind: rpc.KindDeployment, ID: "orphan"}]
			stuck, o3 := r.final[Key{Kind: rpc.KindDeployment, ID: "stuck"}]
			return o1 && o2 && o3 && !old && !orphan && !stuck && r.final[Key{Kind: rpc.KindDeployment, ID: "kept"}]
		})
	})
}

// Requeue applies a resource's latest intent again only when the filter
// accepts it (the agent's: an object showing up somewhere else than the
// intent puts the resource's objects). Garbage collection keeps a resource
// the full sync listed, wherever its objects are (the sync's own apply of
// it removes what it left elsewhere), and counts only what it deletes.
func TestRequeueAppliesAgainOnlyWhatTheFilterAccepts(t *testing.T) {
	r := newRecorder()
	busy := Key{Kind: rpc.KindDeployment, ID: "busy"}
	g := &gated{recorder: r, key: busy, entered: make(chan struct{}), open: make(chan struct{})}
	d := New(g, slog.New(slog.DiscardHandler), nil)
	start(t, d, 1)
	x := Key{Kind: rpc.KindDeployment, ID: "x"}
	handled := func() []Key { r.mu.Lock(); defer r.mu.Unlock(); return slices.Clone(r.handled) }
	d.BeginFullSync()
	must(t, d.Event(deploymentIn("x", "ns-b", ctrlv1.Action_ACTION_APPLY)))
	eventually.True(t, 5*time.Second, "the full sync's apply did not run", func() bool { return len(handled()) == 1 })
	if n := d.Collect([]Key{x}); n != 0 {
		t.Fatalf("collected %d, want nothing: x is listed", n)
	}

	// The only worker is busy: whatever Requeue queues stays in the queue.
	must(t, d.Event(deployment(busy.ID, ctrlv1.Action_ACTION_APPLY)))
	<-g.entered
	var seen Intent
	d.Requeue(x, func(in Intent) bool { seen = in; return false })
	if n := d.Depth(); n != 0 {
		t.Fatalf("%d resources queued after a requeue the filter refused", n)
	}
	if ns := seen.Event.GetDeployment().GetDeployment().GetNamespace(); ns != "ns-b" {
		t.Fatalf("the filter was given an intent for %q, want x's latest (ns-b)", ns)
	}
	d.Requeue(x, func(Intent) bool { return true })
	if n := d.Depth(); n != 1 {
		t.Fatalf("%d resources queued after a requeue the filter accepted, want x", n)
	}
	close(g.open)
	eventually.True(t, 5*time.Second, "x was not applied again", func() bool { return len(handled()) == 3 })
	if got := handled(); !slices.Equal(got, []Key{x, busy, x}) {
		t.Fatalf("handled %v, want x, busy, then x again", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.final[x] {
		t.Fatalf("a listed resource was deleted: %v", r.final)
	}
}

// gated holds the apply of one key until open is closed, telling entered
// when it starts. Other keys go to the recorder.
type gated struct {
	*recorder
	key     Key
	entered chan struct{}
	open    chan struct{}
}

func (g *gated) Handle(ctx context.Context, key Key, in Intent) error {
	if key == g.key {
		g.entered <- struct{}{}
		<-g.open
	}
	return g.recorder.Handle(ctx, key, in)
}

func deploymentIn(id, ns string, action ctrlv1.Action) *ctrlv1.DeploymentChangeEvent {
	ev := deployment(id, action)
	ev.GetDeployment().GetDeployment().Namespace = ns
	return ev
}

// A full sync re-sends every resource whatever its version, so its event
// for a resource whose apply keeps failing does not release the bookmarks
// the failing event holds (a resume from one would not send it again):
// a resync while an apply fails does not ack past it.
func TestFullSyncDoesNotReleaseBookmarksHeldByAFailingApply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		bad, good := Key{Kind: rpc.KindDeployment, ID: "bad"}, Key{Kind: rpc.KindDeployment, ID: "good"}
		r.failLeft[bad] = 1 << 30
		d := New(r, slog.New(slog.DiscardHandler), nil)
		start(t, d, 2)
		must(t, d.Event(deployment(bad.ID, ctrlv1.Action_ACTION_APPLY)))
		d.Bookmark(5)
		eventually.True(t, 5*time.Second, "the failing apply is not reported", func() bool { return d.LastError() != "" })

		d.BeginFullSync()
		must(t, d.Event(deployment(bad.ID, ctrlv1.Action_ACTION_APPLY)))
		must(t, d.Event(deployment(good.ID, ctrlv1.Action_ACTION_APPLY)))
		d.Collect(nil)
		d.Bookmark(7)
		eventually.True(t, 5*time.Second, "other resources blocked", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.final[good] })
		if d.HasAcked() {
			t.Fatalf("cursor acked to %d while the apply before it still fails", d.Acked())
		}
		r.mu.Lock()
		r.failLeft[bad] = 0
		r.mu.Unlock()
		eventually.True(t, 5*time.Second, "cursor never advanced after the retry succeeded", func() bool { return d.Acked() == 7 })
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
