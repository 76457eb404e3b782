package tailer_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
)

// jump moves the auto-increment counter of deployment_changes n values past
// the newest pk, as an operator's ALTER TABLE, a bulk insert's unused
// reservation or another primary's auto_increment_offset would, and
// returns the pk the next change will take.
func jump(t testing.TB, db *store.DB, n uint64) uint64 {
	var newest uint64
	if err := db.SQL.QueryRow("SELECT COALESCE(MAX(pk), 0) FROM deployment_changes").Scan(&newest); err != nil {
		t.Fatal(err)
	}
	next := newest + n + 1
	if _, err := db.SQL.Exec(fmt.Sprintf("ALTER TABLE deployment_changes AUTO_INCREMENT = %d", next)); err != nil {
		t.Fatal(err)
	}
	return next
}

// A jump of a million auto-increment values is a million pks no change
// will ever take. The change after the jump is delivered at once, the
// watermark passes the jump once the filler has settled it, and the
// tailer's bookkeeping of the open holes stays small meanwhile.
func TestAutoIncrementJumpIsSettled(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts a million gap rows; skipped in -short mode")
	}
	db := storetest.New(t)
	tl := startTailer(t, db, tailer.Config{PollInterval: 20 * time.Millisecond, HoleGrace: 50 * time.Millisecond})
	ctx := context.Background()
	sub, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := openChange(t, db, "eu").Commit(); err != nil {
		t.Fatal(err)
	}
	collect(t, sub, 1, 2*time.Second)

	const n = 1_000_000
	after := jump(t, db, n)
	if err := openChange(t, db, "eu").Commit(); err != nil {
		t.Fatal(err)
	}
	got := collect(t, sub, 1, 2*time.Second)
	if got[0].Version != after {
		t.Fatalf("want the change after the jump (pk %d) delivered at once, got %+v", after, got)
	}
	start := time.Now()
	waitWatermark(t, tl, func(w uint64) bool { return w >= after }, 5*time.Minute)
	t.Logf("watermark passed a jump of %d pks after %s", n, time.Since(start).Round(time.Millisecond))
}

// BenchmarkAutoIncrementJump: time from a jump of N pks (and one change
// after it) until the watermark passes it, with production settings, and
// the tailer's heap while it settles.
func BenchmarkAutoIncrementJump(b *testing.B) {
	for _, n := range []uint64{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pks=%d", n), func(b *testing.B) {
			var settle time.Duration
			var peakHeap uint64
			for range b.N {
				db := storetest.New(b)
				tl := startTailer(b, db, tailer.Config{})
				if err := openChange(b, db, "eu").Commit(); err != nil {
					b.Fatal(err)
				}
				waitWatermark(b, tl, func(w uint64) bool { return w >= 1 }, 5*time.Second)
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				after := jump(b, db, n)
				start := time.Now()
				if err := openChange(b, db, "eu").Commit(); err != nil {
					b.Fatal(err)
				}
				for tl.Watermark() < after {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapAlloc > before.HeapAlloc {
						peakHeap = max(peakHeap, m.HeapAlloc-before.HeapAlloc)
					}
					if time.Since(start) > 10*time.Minute {
						b.Fatalf("watermark %d did not pass the jump to %d", tl.Watermark(), after)
					}
					time.Sleep(10 * time.Millisecond)
				}
				settle += time.Since(start)
			}
			b.ReportMetric(settle.Seconds()/float64(b.N), "s/settle")
			b.ReportMetric(float64(peakHeap)/(1<<20), "MiB-peak-heap")
		})
	}
}
