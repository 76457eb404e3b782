package kubetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/deploysync/deploysync/internal/ci"
)

// Shared is one control plane for a whole test package, started by the
// first test that asks for it and stopped after the last:
//
//	var shared = kubetest.Shared{Options: kubetest.Options{Workloads: true}}
//	func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &shared)) }
//	func TestX(t *testing.T) { c := shared.Get(t); ns := c.Namespace(t); ... }
type Shared struct {
	Options Options

	once sync.Once
	c    *Cluster
	err  error
}

// RunShared runs the package's tests and then stops the control planes
// that were started.
func RunShared(m *testing.M, shared ...*Shared) int {
	code := m.Run()
	for _, s := range shared {
		if s.c != nil {
			s.c.Stop()
		}
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
	s.once.Do(func() { s.c, s.err = Start(context.Background(), s.Options) })
	if errors.Is(s.err, ErrNoBinaries) {
		if ci.Running() {
			t.Fatal(s.err)
		}
		t.Skip(s.err.Error() + " (skipping outside CI)")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.c
}
