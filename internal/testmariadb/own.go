package testmariadb

import (
	"context"
	"errors"
	"testing"

	"github.com/deploysync/deploysync/internal/ci"
)

// Own starts a server of t's own until t ends. Without the server
// binaries it fails t in CI, so CI never passes without what needs the
// server, and elsewhere returns nil, having said why.
func Own(t testing.TB) *Server {
	t.Helper()
	m, err := Start(context.Background())
	if missing(t, err) {
		return nil
	}
	t.Cleanup(m.Stop)
	return m
}

// OwnGalera starts a Galera cluster of t's own until t ends. It skips t in
// -short mode, and where the binaries are missing fails t in CI and skips
// it elsewhere, saying why.
func OwnGalera(t testing.TB) *Galera {
	t.Helper()
	if testing.Short() {
		t.Skip("testmariadb: starts a Galera cluster; skipped in -short mode")
	}
	g, err := StartGalera(context.Background())
	if missing(t, err) {
		t.Skip("no Galera cluster: see the line above")
	}
	t.Cleanup(g.Stop)
	return g
}

// missing reports whether err says the binaries are missing, having failed
// t in CI or logged it elsewhere; any other error fails t.
func missing(t testing.TB, err error) bool {
	t.Helper()
	switch {
	case errors.Is(err, ErrNotInstalled):
		if ci.Running() {
			t.Fatal(err)
		}
		t.Logf("%v (going without it outside CI)", err)
		return true
	case err != nil:
		t.Fatal(err)
	}
	return false
}
