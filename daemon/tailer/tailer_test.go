package tailer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/eventually"
)

func startTailer(t testing.TB, db *store.DB, cfg tailer.Config) *tailer.Tailer {
	t.Helper()
	return startTailerWith(t, db, cfg, metrics.New(prometheus.NewRegistry()))
}

// awaitEnd takes what sub receives until it ends, within limit, and fails
// t unless it ended with want; stillOpen says what a subscription that
// outlived limit means.
func awaitEnd(t *testing.T, sub *tailer.Subscription, limit time.Duration, want error, stillOpen string) {
	t.Helper()
	deadline := time.After(limit)
	for open := true; open; {
		select {
		case <-sub.Ready():
			_, open = sub.Take(64)
		case <-deadline:
			t.Fatal(stillOpen)
		}
	}
	if !errors.Is(sub.Err(), want) {
		t.Fatalf("the subscription ended with %v, want %v", sub.Err(), want)
	}
}

// startTailerWith runs a tailer reporting to m until t ends.
func startTailerWith(t testing.TB, db *store.DB, cfg tailer.Config, m *metrics.Metrics) *tailer.Tailer {
	t.Helper()
	tl := tailer.New(db.SQL, cfg, slog.New(slog.DiscardHandler), m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return tl
}

// change writes one change row (through the change feed) and returns the
// open transaction, so the test decides when it commits.
func openChange(t testing.TB, db *store.DB, region string) *ent.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Ent.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = tx.Sentinel.Create().SetID(nextID()).SetWorkspaceID("w").SetEnvironmentID(nextID()).
		SetRegion(region).SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

var sentinels atomic.Int64

// nextID names a fresh sentinel (and its environment).
func nextID() string { return fmt.Sprintf("s%d", sentinels.Add(1)) }

// waitWatermark waits until the tailer's watermark satisfies cond, for at
// most within, and returns it.
func waitWatermark(t testing.TB, tl *tailer.Tailer, cond func(uint64) bool, within time.Duration) uint64 {
	t.Helper()
	var w uint64
	reached := false
	defer func() {
		if !reached {
			t.Logf("the watermark was %d", w)
		}
	}()
	eventually.True(t, within, "the watermark never reached the expected value", func() bool {
		w = tl.Watermark()
		return cond(w)
	})
	reached = true
	return w
}

// A transaction holding a low pk open holds the watermark below it for as
// long as it stays open, however many later changes commit and however
// often the filler runs; a later change is still delivered at once
// (early). When it commits, its change is delivered and W moves on.
func TestOpenTransactionHoldsWatermarkButNotDelivery(t *testing.T) {
	db := storetest.New(t)
	tl := startTailer(t, db, tailer.Config{PollInterval: 5 * time.Millisecond, HoleGrace: 20 * time.Millisecond, FillerLockWait: time.Second})
	ctx := context.Background()
	sub, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	slow := openChange(t, db, "eu") // takes pk 1 and stays open
	fast := openChange(t, db, "eu") // pk 2
	if err := fast.Commit(); err != nil {
		t.Fatal(err)
	}
	got := collect(t, sub, 1, 2*time.Second)
	if got[0].Version != 2 {
		t.Fatalf("want the later change (pk 2) delivered early, got %+v", got)
	}
	// Several filler rounds (grace 20ms, lock wait 1s) pass meanwhile.
	time.Sleep(1500 * time.Millisecond)
	if w := tl.Watermark(); w != 0 {
		t.Fatalf("watermark %d passed an open transaction's pk 1", w)
	}
	if err := slow.Commit(); err != nil {
		t.Fatal(err)
	}
	got = collect(t, sub, 1, 3*time.Second)
	if got[0].Version != 1 {
		t.Fatalf("want the slow change (pk 1) delivered after its commit, got %+v", got)
	}
	waitWatermark(t, tl, func(w uint64) bool { return w == 2 }, 3*time.Second)
}

// A rolled-back insert leaves a hole forever; the filler settles it, so
// the watermark stalls no longer than the grace window plus a poll and the
// filler's run; also when each poll has a deadline (UnavailableAfter), which
// the filler, running past its poll, must not inherit.
func TestRolledBackHoleIsSettledQuickly(t *testing.T) {
	for _, unavailableAfter := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("unavailable-after=%s", unavailableAfter), func(t *testing.T) {
			rolledBackHoleIsSettledQuickly(t, unavailableAfter)
		})
	}
}

func rolledBackHoleIsSettledQuickly(t *testing.T, unavailableAfter time.Duration) {
	db := storetest.New(t)
	grace := 100 * time.Millisecond
	tl := startTailer(t, db, tailer.Config{PollInterval: 10 * time.Millisecond, HoleGrace: grace, UnavailableAfter: unavailableAfter})
	dead := openChange(t, db, "eu")
	live := openChange(t, db, "eu")
	if err := dead.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := live.Commit(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitWatermark(t, tl, func(w uint64) bool { return w >= 2 }, 5*time.Second)
	t.Logf("watermark passed the rolled-back pk after %s (grace %s)", time.Since(start).Round(time.Millisecond), grace)

	// The settled pk now holds a gap row, which a restarted tailer (or
	// another replica) starts above, from the persisted watermark.
	var gaps int
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM deployment_changes WHERE resource_type = 'gap'").Scan(&gaps); err != nil {
		t.Fatal(err)
	}
	if gaps != 1 {
		t.Fatalf("want one gap row for the rolled-back pk, got %d", gaps)
	}
	eventually.True(t, 3*time.Second, "the watermark was not persisted", func() bool {
		w, err := changelog.ReadMark(context.Background(), db.SQL, changelog.MarkSafeWatermark)
		return err == nil && w >= 2
	})
	again := startTailer(t, db, tailer.Config{})
	waitWatermark(t, again, func(w uint64) bool { return w >= 2 }, time.Second)
}

// Subscribers get only their region's changes; the database up to the
// subscription's watermark, its early changes and its notices together
// cover every change.
func TestSubscriptionCoversEveryChangeOfItsRegion(t *testing.T) {
	db := storetest.New(t)
	tl := startTailer(t, db, tailer.Config{PollInterval: 5 * time.Millisecond, HoleGrace: 50 * time.Millisecond})
	ctx := context.Background()
	held := openChange(t, db, "eu") // pk 1, open: later rows stay "early"
	for _, r := range []string{"eu", "us", "eu"} {
		if err := openChange(t, db, r).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 2*time.Second, "early eu changes not visible", func() bool {
		sub, _ := tl.Subscribe(ctx, "eu")
		defer sub.Close()
		return len(sub.Early) == 2
	})

	sub, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if sub.Watermark != 0 || sub.Early[0].Version != 2 || sub.Early[1].Version != 4 {
		t.Fatalf("subscription: W=%d early=%+v", sub.Watermark, sub.Early)
	}
	if err := openChange(t, db, "us").Commit(); err != nil {
		t.Fatal(err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := openChange(t, db, "eu").Commit(); err != nil {
		t.Fatal(err)
	}
	got := collect(t, sub, 2, 3*time.Second)
	versions := []uint64{got[0].Version, got[1].Version}
	if !(versions[0] == 1 && versions[1] == 6) && !(versions[0] == 6 && versions[1] == 1) {
		t.Fatalf("want eu changes 1 and 6, got %+v", got)
	}
	for _, c := range got {
		if c.Region != "eu" {
			t.Fatalf("eu subscriber got %+v", c)
		}
	}
}

// collect reads n changes from the subscription.
func collect(t *testing.T, sub *tailer.Subscription, n int, within time.Duration) []changelog.Change {
	t.Helper()
	var out []changelog.Change
	deadline := time.After(within)
	for len(out) < n {
		select {
		case <-sub.Ready():
			notes, ok := sub.Take(64)
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
			for _, note := range notes {
				out = append(out, note.Changes...)
			}
		case <-deadline:
			t.Fatalf("got %d of %d changes within %s: %+v", len(out), n, within, out)
		}
	}
	return out
}
