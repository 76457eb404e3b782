package sshserve

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// hangingRegistry answers only when its caller gives up, as a database
// that hangs would (narrow fake).
type hangingRegistry struct{}

func (hangingRegistry) Find(ctx context.Context, _ string) (Identity, bool, error) {
	<-ctx.Done()
	return Identity{}, false, ctx.Err()
}

func (hangingRegistry) Live(ctx context.Context, _ []string) (map[string]Identity, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// While the database hangs, key lookups and the re-check give up in time:
// lookups do not hold the lookup slots for ever, and the next ones run.
func TestRegistryCallsHaveADeadline(t *testing.T) {
	cfg := Config{AuthTimeout: 100 * time.Millisecond, Recheck: 100 * time.Millisecond}
	cfg.fill()
	s := &Server{cfg: cfg, keys: hangingRegistry{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		lookups: newKeyLookups(keyLookupsAtOnce),
		live:    map[*liveSession]struct{}{{fingerprint: "SHA256:a", end: func(error) {}}: {}}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 3 * keyLookupsAtOnce {
			wg.Go(func() {
				if _, _, err := s.findKey(context.Background(), "SHA256:a"); err == nil {
					t.Error("a hanging lookup succeeded")
				}
			})
		}
		wg.Wait()
		s.recheckOnce(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("registry calls still wait on a hanging database")
	}
	if n := len(s.lookups.slots); n != 0 {
		t.Errorf("%d lookup slots still held", n)
	}
}

// flakyRegistry knows every key, but after its first lookup (the
// authentication) fails every one until told otherwise (narrow fake).
type flakyRegistry struct {
	calls atomic.Int32
}

func (r *flakyRegistry) Find(context.Context, string) (Identity, bool, error) {
	if r.calls.Add(1) > 1 {
		return Identity{}, false, errors.New("database is down")
	}
	return Identity{Name: "alice"}, true, nil
}

func (r *flakyRegistry) Live(_ context.Context, fps []string) (map[string]Identity, error) {
	out := map[string]Identity{}
	for _, fp := range fps {
		out[fp] = Identity{Name: "alice"}
	}
	return out, nil
}

// A session whose key cannot be looked up just now says to try again,
// not that the key is not registered.
func TestSessionLookupFailureSaysTryAgain(t *testing.T) {
	keys := &flakyRegistry{}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true},
		keys, panicking{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := dialAlice(t, s)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	sess.Stderr = &stderr
	if err := sess.Run("regions"); err == nil || !strings.Contains(stderr.String(), "try again") || strings.Contains(stderr.String(), "not registered") {
		t.Errorf("a session whose key lookup failed ended with %v, stderr %q; want one saying to try again", err, stderr.String())
	}
}

// A session over the per-key bound is refused before its key is looked
// up, as its channel opens: one connection opening many channels costs no
// query each.
func TestSessionOverTheBoundCostsNoLookup(t *testing.T) {
	keys := &removableKey{}
	console := hangingConsole{hangingOperator{called: make(chan struct{}, 1)}}
	counted := &countingKeys{Keys: keys}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true,
		MaxSessionsPerKey: 1}, counted, console, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := dialAlice(t, s)
	first, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	go first.Run("regions")
	<-console.op.called // the first session runs, holding the key's one place
	before := counted.finds.Load()
	for range 5 {
		if sess, err := c.NewSession(); err == nil || !strings.Contains(err.Error(), "too many console sessions") {
			if sess != nil {
				sess.Close()
			}
			t.Fatalf("a session over the bound: %v; want its channel refused, saying why", err)
		}
	}
	if n := counted.finds.Load() - before; n != 0 {
		t.Errorf("%d key lookups for 5 sessions refused by the bound; want none", n)
	}
}

type countingKeys struct {
	Keys
	finds atomic.Int32
}

func (k *countingKeys) Find(ctx context.Context, fp string) (Identity, bool, error) {
	k.finds.Add(1)
	return k.Keys.Find(ctx, fp)
}

func dialAlice(t *testing.T, s *Server) *gossh.Client {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
