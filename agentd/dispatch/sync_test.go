package dispatch

import (
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ctrldView stands for ctrld taking every report: it holds each
// resource's last reported state, and what the last report listed.
type ctrldView struct {
	d    *Dispatcher
	last map[Key]Sync
	sent []Key
}

func newView(d *Dispatcher) *ctrldView { return &ctrldView{d: d, last: map[Key]Sync{}} }

// report takes a report and has ctrld take it.
func (v *ctrldView) report() {
	syncs := v.d.Syncs()
	v.d.Reported(syncs)
	v.sent = nil
	for _, s := range syncs {
		v.last[s.Key] = s
		v.sent = append(v.sent, s.Key)
	}
}

func versioned(ev *ctrlv1.DeploymentChangeEvent, version uint64) *ctrlv1.DeploymentChangeEvent {
	ev.Version = version
	return ev
}

func (r *recorder) setFailing(key Key, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLeft[key] = n
}

// A resource whose apply fails is reported out of sync with its error and
// since when, the same since on every retry; once an apply succeeds it is
// reported in sync at the applied event's version, with no error.
func TestAFailingResourceIsReportedWithItsErrorThenInSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		bad := Key{Kind: rpc.KindDeployment, ID: "bad"}
		r.setFailing(bad, 1<<30)
		d := New(r, slog.New(slog.DiscardHandler), nil)
		start(t, d, 2)
		v := newView(d)

		must(t, d.Event(versioned(deployment(bad.ID, ctrlv1.Action_ACTION_APPLY), 7)))
		eventually.True(t, 5*time.Second, "the failing apply was not reported", func() bool { v.report(); return v.last[bad].Err != "" })
		failing := v.last[bad]
		if failing.InSync || failing.Deleted || failing.AppliedVersion != 0 || failing.Err != "injected failure" || failing.FailingSince.IsZero() {
			t.Fatalf("failing resource reported as %+v, want out of sync at version 0 with its error and since", failing)
		}
		eventually.True(t, 5*time.Second, "the apply was not retried", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.failLeft[bad] < 1<<30-2 })
		v.report()
		if got := v.last[bad]; !got.FailingSince.Equal(failing.FailingSince) {
			t.Fatalf("failing since moved from %v to %v on a retry", failing.FailingSince, got.FailingSince)
		}

		r.setFailing(bad, 0)
		eventually.True(t, 5*time.Second, "the successful apply was not reported", func() bool { v.report(); return v.last[bad].InSync })
		if got := v.last[bad]; got.AppliedVersion != 7 || got.Err != "" || !got.FailingSince.IsZero() || got.Deleted {
			t.Fatalf("applied resource reported as %+v, want in sync at version 7 without an error", got)
		}
	})
}

// A resource's delete is reported deleted, whether the stream asked for
// it or garbage collection did (an event-less delete); once ctrld took
// that, nothing more is reported about it.
func TestADeleteIsReportedDeleted(t *testing.T) {
	r := newRecorder()
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 2)
	v := newView(d)
	gone, orphan := Key{Kind: rpc.KindDeployment, ID: "gone"}, Key{Kind: rpc.KindSentinel, ID: "orphan"}

	must(t, d.Event(versioned(deployment(gone.ID, ctrlv1.Action_ACTION_APPLY), 3)))
	eventually.True(t, 5*time.Second, "the apply was not reported", func() bool { v.report(); return v.last[gone].InSync })
	must(t, d.Event(versioned(deployment(gone.ID, ctrlv1.Action_ACTION_DELETE), 4)))
	eventually.True(t, 5*time.Second, "the stream's delete was not reported", func() bool { v.report(); return v.last[gone].Deleted })

	d.BeginFullSync()
	d.Collect([]Key{orphan})
	eventually.True(t, 5*time.Second, "garbage collection's delete was not reported", func() bool { v.report(); return v.last[orphan].Deleted })
	if s := v.last[orphan]; !s.InSync || s.Err != "" {
		t.Fatalf("collected resource reported as %+v", s)
	}
	v.report()
	if len(v.sent) != 0 {
		t.Fatalf("reported %v again after ctrld took their deletes", v.sent)
	}
}

// Only resources whose state changed are reported: applying one resource
// again to the same end (a drift repair) reports nothing, a new event for
// another reports that one alone.
func TestUnchangedResourcesAreNotReportedAgain(t *testing.T) {
	r := newRecorder()
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 2)
	v := newView(d)
	a, b := Key{Kind: rpc.KindDeployment, ID: "a"}, Key{Kind: rpc.KindCiliumNetworkPolicy, ID: "b"}
	must(t, d.Event(versioned(deployment(a.ID, ctrlv1.Action_ACTION_APPLY), 1)))
	b1 := &ctrlv1.DeploymentChangeEvent{Version: 2, Event: &ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy{
		CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyEvent{Action: ctrlv1.Action_ACTION_APPLY,
			CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyState{PolicyId: b.ID}},
	}}
	must(t, d.Event(b1))
	eventually.True(t, 5*time.Second, "the applies were not reported", func() bool { v.report(); return v.last[a].InSync && v.last[b].InSync })

	calls := r.calls.Load()
	d.Requeue(a, nil)
	eventually.True(t, 5*time.Second, "the requeued resource was not applied again", func() bool { return r.calls.Load() > calls })
	v.report()
	if len(v.sent) != 0 {
		t.Fatalf("reported %v after applying a again to the same end", v.sent)
	}

	must(t, d.Event(versioned(deployment(a.ID, ctrlv1.Action_ACTION_APPLY), 5)))
	eventually.True(t, 5*time.Second, "the new event was not reported", func() bool { v.report(); return v.last[a].AppliedVersion == 5 })
	if !slices.Contains(v.sent, a) || slices.Contains(v.sent, b) {
		t.Fatalf("reported %v, want a and not b", v.sent)
	}
}

// A report ctrld did not take is sent again, and only until it takes it.
func TestAReportCtrldDidNotTakeIsSentAgain(t *testing.T) {
	r := newRecorder()
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 1)
	a := Key{Kind: rpc.KindDeployment, ID: "a"}
	must(t, d.Event(versioned(deployment(a.ID, ctrlv1.Action_ACTION_APPLY), 1)))
	eventually.True(t, 5*time.Second, "the apply did not run", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return len(d.pending) == 0 })

	first := d.Syncs()
	d.Unreported(first) // say, ctrld was down
	again := d.Syncs()
	if len(first) != 1 || !slices.EqualFunc(first, again, Sync.same) {
		t.Fatalf("after a failed report: %+v, want the same as before, %+v", again, first)
	}
	d.Reported(again)
	if left := d.Syncs(); len(left) != 0 {
		t.Fatalf("after ctrld took the report: %+v still to report", left)
	}
}

// A new intent for a failing resource is news even when its apply fails
// the same way: it is reported with the intent's version, so ctrld can
// tell a failure of the current desired state from an old one (a stop, or
// a delete and a deploy again, that fails like the apply before it).
func TestANewIntentFailingTheSameWayIsReported(t *testing.T) {
	r := newRecorder()
	bad := Key{Kind: rpc.KindDeployment, ID: "bad"}
	r.setFailing(bad, 1<<30)
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 2)
	v := newView(d)

	must(t, d.Event(versioned(deployment(bad.ID, ctrlv1.Action_ACTION_APPLY), 7)))
	eventually.True(t, 5*time.Second, "the failing apply was not reported", func() bool { v.report(); return v.last[bad].Err != "" })
	if got := v.last[bad].ReceivedVersion; got != 7 {
		t.Fatalf("failing apply reported at received version %d, want 7", got)
	}
	must(t, d.Event(versioned(deployment(bad.ID, ctrlv1.Action_ACTION_DELETE), 8)))
	must(t, d.Event(versioned(deployment(bad.ID, ctrlv1.Action_ACTION_APPLY), 9)))
	eventually.True(t, 5*time.Second, "the new intent, failing the same way, was not reported", func() bool { v.report(); return v.last[bad].ReceivedVersion == 9 })
	if got := v.last[bad]; got.Err != "injected failure" || got.InSync {
		t.Fatalf("new intent reported as %+v, want failing", got)
	}
}
