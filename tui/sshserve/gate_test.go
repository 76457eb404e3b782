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

// addrConn is a connection from a given address (narrow fake: the gate
// reads only the address and closes it).
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }
func (c addrConn) Close() error         { return nil }

func from(ip string) net.Conn {
	return addrConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

// A flood from many addresses fills the bound in all, but an address a
// session started from before still gets in, through places strangers
// cannot take, each address still within its own bound.
func TestAFloodLeavesKnownAddressesTheirPlaces(t *testing.T) {
	g := newConnGate(4, 2, time.Minute)
	operator := g.admit(from("192.0.2.9"))
	operator.sessionStarted() // a registered key's session: the address is known
	operator.Close()
	for _, ip := range []string{"198.51.100.1", "198.51.100.1", "198.51.100.2", "198.51.100.2"} {
		if g.admit(from(ip)) == nil {
			t.Fatalf("a stranger from %s refused below the bounds", ip)
		}
	}
	if g.admit(from("198.51.100.3")) != nil {
		t.Fatal("a stranger got in past the bound in all")
	}
	first, second := g.admit(from("192.0.2.9")), g.admit(from("192.0.2.9"))
	if first == nil || second == nil {
		t.Fatal("the operator's known address was kept out by the strangers' flood")
	}
	if g.admit(from("192.0.2.9")) != nil {
		t.Error("a known address got past its own bound")
	}
	first.Close()
	if g.admit(from("198.51.100.4")) != nil {
		t.Error("a stranger took a place the known address gave back")
	}
	if g.admit(from("192.0.2.9")) == nil {
		t.Error("the known address could not take its place again")
	}
}
