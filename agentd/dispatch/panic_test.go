package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// panicky panics on its first attempts at one key: a stand-in for any bug
// in a controller. Other keys go to the recorder.
type panicky struct {
	*recorder
	key  Key
	left atomic.Int32
}

func (p *panicky) Handle(ctx context.Context, key Key, in Intent) error {
	if key == p.key && p.left.Add(-1) >= 0 {
		panic("injected: a bug applying " + key.String())
	}
	return p.recorder.Handle(ctx, key, in)
}

// A panic while applying one resource is a failed apply of that resource:
// counted, shown as the last error, holding the cursor, and retried with
// backoff until it succeeds; the other resources are applied meanwhile,
// and the process lives on.
func TestAPanickingApplyIsRetriedAndTheOthersGoOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		bad := Key{Kind: rpc.KindDeployment, ID: "bad"}
		h := &panicky{recorder: r, key: bad}
		h.left.Store(3) // retried after 200, 400 and 800ms
		panics := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"})
		d := New(h, slog.New(slog.DiscardHandler), nil, WithPanics(panics))
		start(t, d, 2)

		must(t, d.Event(deployment("bad", ctrlv1.Action_ACTION_APPLY)))
		for i := range 5 {
			must(t, d.Event(deployment(fmt.Sprintf("good-%d", i), ctrlv1.Action_ACTION_APPLY)))
		}
		d.Bookmark(10)
		applied := func(id string) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.final[Key{Kind: rpc.KindDeployment, ID: id}]
		}
		eventually.True(t, 5*time.Second, "the other resources were not applied", func() bool {
			for i := range 5 {
				if !applied(fmt.Sprintf("good-%d", i)) {
					return false
				}
			}
			return true
		})
		if d.Acked() != 0 {
			t.Errorf("acked %d while a resource before the bookmark had not been applied", d.Acked())
		}
		if e := d.LastError(); !strings.Contains(e, "deployment/bad") || !strings.Contains(e, "panic") {
			t.Errorf("last error %q does not show the panicking resource", e)
		}

		eventually.True(t, 5*time.Second, "the panicking resource was not retried to success", func() bool { return applied("bad") && d.Acked() == 10 })
		if got := testutil.ToFloat64(panics.WithLabelValues("dispatch")); got != 3 {
			t.Errorf("counted %v panics, want 3", got)
		}
		if e := d.LastError(); e != "" {
			t.Errorf("last error %q after the retry succeeded", e)
		}
	})
}

// A panic under the dispatcher's lock (here in a Requeue filter, the
// agent's placement check, which runs there) does not leave the lock held:
// events, bookmarks and applies go on.
func TestAPanicUnderTheLockLeavesTheDispatcherWorking(t *testing.T) {
	r := newRecorder()
	d := New(r, slog.New(slog.DiscardHandler), nil)
	start(t, d, 2)
	x := Key{Kind: rpc.KindDeployment, ID: "x"}
	must(t, d.Event(deployment(x.ID, ctrlv1.Action_ACTION_APPLY)))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the filter's panic did not reach the caller")
			}
		}()
		d.Requeue(x, func(Intent) bool { panic("injected: a bug in a placement check") })
	}()

	done := make(chan error, 1)
	go func() {
		err := d.Event(deployment("y", ctrlv1.Action_ACTION_APPLY))
		d.Bookmark(1)
		done <- err
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the dispatcher is stuck: its lock is still held after the panic")
	}
	eventually.True(t, 5*time.Second, "the events after the panic were not applied", func() bool { return d.Acked() == 1 })
}
