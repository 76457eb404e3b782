package eventually

import (
	"testing"
	"time"
)

// Poll is how often a condition is tried.
const Poll = 20 * time.Millisecond

// True waits until cond holds, trying it every Poll, and fails the test
// with what (what never happened) once within passed without it.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(Poll)
	}
}
