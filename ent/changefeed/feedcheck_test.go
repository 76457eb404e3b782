package changefeed_test

import (
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/internal/feedcheck"
)

// The feed checker finds what the locking reads prevent: with the hooks
// reading the snapshot, a child committed while its deployment's delete
// waits is cascaded away without a change row, and followers keep it. The
// race needs a follower to read between two commits, so the control gets
// several rounds to show it (under -race on a loaded machine it took one
// to three of 600 transactions each; alone it shows in the first round,
// but a full suite's run once went 8 rounds without, so it gets 20: a
// round takes about 5 s, and only a round that does not show it costs).
func TestFeedCheckerCatchesHooksWithoutLockingReads(t *testing.T) {
	changefeed.WithoutLockingReads(t)
	feedcheck.MustCatch(t, 20, func(attempt int) (feedcheck.System, feedcheck.Config) {
		env := servertest.Start(t, server.Config{})
		// Transactions held open longer than usual widen the window in which
		// a follower reads a child the delete then cascades away, so the
		// control shows the loss on a loaded machine too.
		return feedcheck.System{DB: env.DB, Watch: env.Agent}, feedcheck.Config{Seed: uint64(attempt + 1), Transactions: 600, MaxHold: 250 * time.Millisecond}
	})
}
