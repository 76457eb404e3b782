package feedcheck

import (
	"context"
	"testing"
)

// MustCatch is the control of a checker that must be able to fail: it runs
// the checker on a deliberately broken system (each attempt on a new one
// from start) and fails t unless some run reports a violation. Whether a
// broken system loses a change in a given run depends on how commits and
// reads interleave, so it gets attempts runs to show one.
func MustCatch(t testing.TB, attempts int, start func(attempt int) (System, Config)) {
	t.Helper()
	for attempt := range attempts {
		sys, cfg := start(attempt)
		rep, err := Run(context.Background(), sys, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %s", attempt, rep.Summary())
		if len(rep.Violations) > 0 {
			t.Logf("caught, e.g.: %s", rep.Violations[0])
			return
		}
	}
	t.Fatalf("the checker found nothing wrong with the broken system in %d runs", attempts)
}
