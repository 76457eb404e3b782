package kubetest

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Shared is one control plane for a whole test package, started by the
// first test that asks for it and stopped after the last:
//
//	var shared kubetest.Shared
//	func TestMain(m *testing.M) { os.Exit(shared.Run(m, kubetest.Options{})) }
//	func TestX(t *testing.T) { c := shared.Get(t); ns := c.Namespace(t); ... }
type Shared struct {
	opts Options
	once sync.Once
	c    *Cluster
	err  error
}

// Run runs the package's tests and stops the control plane afterwards.
func (s *Shared) Run(m *testing.M, opts Options) int {
	s.opts = opts
	code := m.Run()
	if s.c != nil {
		s.c.Stop()
	}
	return code
}

// Get returns the package's control plane, starting it on first use. Like
// StartForTest it fails in CI and skips elsewhere when the binaries are
// missing.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("kubetest: needs a Kubernetes control plane; skipped in -short mode")
	}
	s.once.Do(func() { s.c, s.err = Start(context.Background(), s.opts) })
	if errors.Is(s.err, ErrNoBinaries) {
		if inCI() {
			t.Fatal(s.err)
		}
		t.Skip(s.err.Error() + " (skipping outside CI)")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.c
}
