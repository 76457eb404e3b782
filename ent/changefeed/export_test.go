package changefeed

import "testing"

// WithoutLockingReads makes the hooks decide what a statement touches from
// plain snapshot reads, as they did before invariant I6, until t ends.
func WithoutLockingReads(t testing.TB) {
	lockingReads = false
	t.Cleanup(func() { lockingReads = true })
}
