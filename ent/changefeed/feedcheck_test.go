package changefeed_test

import (
	"testing"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/internal/feedcheck"
)

// The feed checker finds what the locking reads prevent: with the hooks
// reading the snapshot, a child committed while its deployment's delete
// waits is cascaded away without a change row, and followers keep it. The
// race needs a follower to read between two commits, so the control gets
// a few rounds to show it.
func TestFeedCheckerCatchesHooksWithoutLockingReads(t *testing.T) {
	changefeed.WithoutLockingReads(t)
	feedcheck.MustCatch(t, 5, func(attempt int) (feedcheck.System, feedcheck.Config) {
		env := servertest.Start(t, server.Config{})
		return feedcheck.System{DB: env.DB, Watch: env.Agent}, feedcheck.Config{Seed: uint64(attempt + 1), Transactions: 600}
	})
}
