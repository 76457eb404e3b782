package tailer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/internal/recovery"
)

// fillOldHoles starts the filler for holes older than HoleGrace, one run
// at a time; Run waits for it before returning. Called with mu held.
func (t *Tailer) fillOldHoles(ctx context.Context, now time.Time) {
	if t.filling || t.stopped || now.Before(t.fillerHold) {
		return
	}
	due := t.holes.due(now.Add(-t.cfg.HoleGrace), maxFill)
	if len(due) == 0 {
		return
	}
	t.filling = true
	t.fillers.Go(func() {
		// It runs past the poll that started it; the poll after it picks
		// up the result. Stopping the tailer cancels it.
		runCtx, cancel := context.WithTimeout(ctx, t.cfg.FillerLockWait+5*time.Second)
		defer cancel()
		// A panic is one failed run (logged and counted): filling must be
		// cleared, or no hole would ever be filled again and the watermark
		// would stay where it is.
		err := t.guard.Run("tailer-filler", func() error { return t.fill(runCtx, due) })
		var p *recovery.Panic
		panicked := errors.As(err, &p)
		t.mu.Lock()
		t.filling = false
		if panicked {
			t.fillerHold = time.Now().Add(t.fillerBackoff.Next())
		} else {
			t.fillerBackoff.Reset()
		}
		t.mu.Unlock()
		if ctx.Err() != nil || panicked {
			return // stopping, or logged by the guard
		}
		if err != nil {
			t.metrics.FillerRuns.WithLabelValues("error").Inc()
			t.log.Info("tailer: filler could not settle holes yet (an open transaction holds them?); retrying", "holes", len(due), "first", due[0], "err", err)
			return
		}
		t.metrics.FillerRuns.WithLabelValues("ok").Inc()
		t.Poke()
	})
}

// fill settles the given pks: INSERT IGNORE of a gap row per pk. For a pk
// an in-flight transaction has inserted, InnoDB makes this wait for that
// transaction; after it commits the gap row is ignored as a duplicate,
// after it rolls back the gap row takes the pk. Either way the pk is
// settled when this returns without error.
func (t *Tailer) fill(ctx context.Context, pks []uint64) error {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	wait := int((t.cfg.FillerLockWait + time.Second - 1) / time.Second)
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", wait)); err != nil {
		return err
	}
	// The session setting must not leak into the pool.
	defer conn.ExecContext(context.Background(), "SET SESSION innodb_lock_wait_timeout = DEFAULT")

	return changelog.InsertFillers(ctx, conn, pks)
}
