package changefeed_test

import (
	"context"
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
	const attempts = 5
	for attempt := range attempts {
		env := servertest.Start(t, server.Config{})
		rep, err := feedcheck.Run(context.Background(), feedcheck.System{DB: env.DB, Watch: env.Agent},
			feedcheck.Config{Seed: uint64(attempt + 1), Transactions: 600})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %s", attempt, rep.Summary())
		if len(rep.Violations) > 0 {
			t.Logf("caught, e.g.: %s", rep.Violations[0])
			return
		}
	}
	t.Fatalf("the feed checker found nothing wrong with unlocked hooks in %d rounds", attempts)
}
