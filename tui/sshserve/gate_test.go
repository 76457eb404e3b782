package sshserve

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// slowRegistry knows no key and notes how many lookups ran at once
// (narrow fake: the question is only how the server calls it).
type slowRegistry struct {
	now, most atomic.Int32
	calls     atomic.Int32
}

func (r *slowRegistry) Find(context.Context, string) (Identity, bool, error) {
	r.calls.Add(1)
	n := r.now.Add(1)
	defer r.now.Add(-1)
	for {
		m := r.most.Load()
		if n <= m || r.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	return Identity{}, false, nil
}

func (r *slowRegistry) Live(context.Context, []string) (map[string]Identity, error) {
	return nil, nil
}

func TestKeyLookupsRunAFewAtOnce(t *testing.T) {
	keys := &slowRegistry{}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true,
		AuthBurst: 1000, AuthPerSecond: 1000},
		keys, panicking{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var wg sync.WaitGroup
	for range 12 { // strangers, each with a key of their own
		wg.Go(func() {
			_, priv, _ := ed25519.GenerateKey(rand.Reader)
			signer, _ := gossh.NewSignerFromKey(priv)
			c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{User: "x", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
				HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
			if err == nil {
				c.Close()
				t.Error("an unknown key was let in")
			}
		})
	}
	wg.Wait()
	if keys.calls.Load() < 12 {
		t.Fatalf("%d lookups for 12 strangers", keys.calls.Load())
	}
	if most := keys.most.Load(); most > keyLookupsAtOnce {
		t.Errorf("%d key lookups ran at once; bound %d", most, keyLookupsAtOnce)
	}
}

func TestAddrKeyGroupsIPv6By64(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"[2001:db8:1:2::1]:22", "[2001:db8:1:2:ffff::9]:22", true},
		{"[2001:db8:1:2::1]:22", "[2001:db8:1:3::1]:22", false},
		{"198.51.100.7:1", "198.51.100.7:2", true},
		{"198.51.100.7:1", "198.51.100.8:1", false},
		{"[::ffff:198.51.100.7]:1", "198.51.100.7:2", true},
	} {
		a, _ := net.ResolveTCPAddr("tcp", c.a)
		b, _ := net.ResolveTCPAddr("tcp", c.b)
		if got := addrKey(a) == addrKey(b); got != c.same {
			t.Errorf("%s and %s one source: %v, want %v (%s, %s)", c.a, c.b, got, c.same, addrKey(a), addrKey(b))
		}
	}
}
