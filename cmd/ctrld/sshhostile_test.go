package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/daemon/operatorkeys"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// Hostile and careless clients (issue 25, item 5). Each must leave the
// other sessions and ctrld unharmed and write nothing: no audit record, no
// key. Flooding clients come from other loopback addresses (127.0.0.2…)
// than the operators (127.0.0.1), as they would from other hosts.

// from is a loopback source address other than 127.0.0.1.
func from(i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 1+byte(i/250), 2+byte(i%250))}
}

// dialFrom connects to addr from the source address src.
func dialFrom(src *net.TCPAddr, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// sshFrom is an SSH login from src.
func (e *sshEnv) sshFrom(src *net.TCPAddr, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	conn, err := dialFrom(src, e.console.Addr())
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	c, chans, reqs, err := gossh.NewClientConn(conn, e.console.Addr(), &gossh.ClientConfig{
		User: "whoever", Auth: auth, HostKeyCallback: gossh.FixedHostKey(e.hostKey)})
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return gossh.NewClient(c, chans, reqs), nil
}

// nothingWritten fails t when ctrld wrote an audit record or changed the
// registered keys (want is how many there should be).
func (e *sshEnv) nothingWritten(t *testing.T, keys int) {
	t.Helper()
	ctx := context.Background()
	if n := e.DB.Ent.AuditLog.Query().CountX(ctx); n != 0 {
		t.Errorf("%d audit records written", n)
	}
	if n := e.DB.Ent.OperatorKey.Query().CountX(ctx); n != keys {
		t.Errorf("%d registered keys, want %d", n, keys)
	}
}

// stillServes fails t unless con, an open console, still redraws: a key
// that changes the screen shows its effect.
func stillServes(t *testing.T, con *console) {
	t.Helper()
	con.stdin.Write([]byte("?"))
	con.waitFor(t, "quit")
	con.stdin.Write([]byte("?"))
}

// A thousand connections that never send a byte: beyond the bounds on
// connections not yet in a session (16 per address, 64 in all) each is
// closed at once, without costing a handshake. A person already in a
// console keeps it, and one from an address of their own logs in
// meanwhile.
func TestSSHConsoleSurvivesAThousandSilentConnections(t *testing.T) {
	e := startSSH(t, sshserve.Config{})
	e.AgentToken("eu-west")
	alice := e.person(t, "alice", operatorkeys.Operator)
	bob := e.person(t, "bob", operatorkeys.ReadOnly)
	c, err := e.dial(gossh.PublicKeys(alice))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	con := openConsole(t, c, 100, 30, nil)
	con.waitFor(t, "eu-west")

	d := sshserve.Defaults
	// flood opens n connections at once, spread over addrs source
	// addresses, and returns those the server took in (it sent its
	// version line); it fails t for any it neither took in nor closed
	// at once.
	flood := func(n, addrs int) []net.Conn {
		var (
			mu   sync.Mutex
			kept []net.Conn
			wg   sync.WaitGroup
		)
		held := make([]int, addrs)
		sem := make(chan struct{}, 200)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				conn, err := dialFrom(from(i%addrs), e.console.Addr())
				if err != nil {
					t.Errorf("connect: %v", err)
					return
				}
				conn.SetReadDeadline(time.Now().Add(3 * time.Second))
				line, err := bufio.NewReader(conn).ReadString('\n')
				switch {
				case err == nil && strings.HasPrefix(line, "SSH-2.0-"):
					conn.SetReadDeadline(time.Time{})
					mu.Lock()
					kept = append(kept, conn)
					held[i%addrs]++
					mu.Unlock()
				case err != nil && strings.Contains(err.Error(), "timeout"):
					t.Errorf("connection %d was neither taken in nor closed within 3s", i)
					conn.Close()
				default: // closed at once
					conn.Close()
				}
			})
		}
		wg.Wait()
		for a, h := range held {
			if h > d.MaxUnauthenticatedPerAddress {
				t.Errorf("address %v: %d connections not in a session taken in, bound %d", from(a).IP, h, d.MaxUnauthenticatedPerAddress)
			}
		}
		if len(kept) > d.MaxUnauthenticated {
			t.Errorf("%d connections not in a session taken in, bound %d", len(kept), d.MaxUnauthenticated)
		}
		return kept
	}
	closeAll := func(conns []net.Conn) {
		for _, c := range conns {
			c.Close()
		}
	}

	start := time.Now()
	// Three addresses: 48 held, under the total; bob's own address is free.
	kept := flood(1000, 3)
	if len(kept) != 3*d.MaxUnauthenticatedPerAddress {
		t.Errorf("%d connections held, want %d (16 from each of 3 addresses)", len(kept), 3*d.MaxUnauthenticatedPerAddress)
	}
	bc, err := e.dial(gossh.PublicKeys(bob))
	if err != nil {
		t.Fatalf("bob cannot log in while a thousand silent connections come from elsewhere: %v", err)
	}
	if out, stderr, status := command(t, bc, "regions"); status != 0 || !strings.Contains(out, "eu-west") {
		t.Errorf("bob's command during the flood: status %d, %q, %q", status, out, stderr)
	}
	bc.Close()
	stillServes(t, con)
	closeAll(kept)

	// Many addresses: the total bound holds too, and the person in a
	// console keeps it. bob, whose address a session started from
	// before, still gets in: known addresses have places of their own
	// that a stranger's flood cannot take.
	kept = flood(1000, 50)
	if len(kept) != d.MaxUnauthenticated {
		t.Errorf("%d connections held, want the total bound %d", len(kept), d.MaxUnauthenticated)
	}
	stillServes(t, con)
	bc, err = e.dial(gossh.PublicKeys(bob))
	if err != nil {
		t.Fatalf("bob, who logged in from his address before, cannot log in while a flood from 50 others fills the bound: %v", err)
	}
	bc.Close()
	closeAll(kept)
	t.Logf("2,000 silent connections in %v", time.Since(start).Round(time.Millisecond))

	// Gone, they leave room at once.
	eventually.True(t, 5*time.Second, "bob cannot log in after the flood left", func() bool {
		bc, err := e.dial(gossh.PublicKeys(bob))
		if err != nil {
			return false
		}
		bc.Close()
		return true
	})
	e.nothingWritten(t, 2)
}

// countingKeys is the registry with its lookups counted: how many, and
// the most at once.
type countingKeys struct {
	sshserve.Keys
	finds, running, most atomic.Int64
}

func (k *countingKeys) Find(ctx context.Context, fp string) (sshserve.Identity, bool, error) {
	k.finds.Add(1)
	n := k.running.Add(1)
	defer k.running.Add(-1)
	for m := k.most.Load(); n > m && !k.most.CompareAndSwap(m, n); m = k.most.Load() {
	}
	return k.Keys.Find(ctx, fp)
}

// An authentication flood: clients from 20 addresses each offering fresh
// unknown keys, 5 a connection, as fast as the server answers. Lookups run
// at most 4 at once and, once an address spent its budget (10, then 1 a
// second), its fresh keys cost none; operators, from their own address and
// from one of the flooding ones, still log in.
func TestSSHConsoleSurvivesAnAuthenticationFlood(t *testing.T) {
	env := servertest.Start(t, serverTestConfig())
	keys := &countingKeys{Keys: registeredKeys{operatorkeys.New(env.DB.Ent)}}
	e := startSSHWith(t, env, sshserve.Config{}, keys)
	env.AgentToken("eu-west")
	alice := e.person(t, "alice", operatorkeys.Operator)
	bob := e.person(t, "bob", operatorkeys.Operator)
	// bob logs in once from an address that floods later: the replica
	// then knows his key (a regular), so the spent budget does not keep
	// him out.
	if c, err := e.sshFrom(from(0), gossh.PublicKeys(bob)); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	before := keys.finds.Load()

	const addrs, perAddr = 20, 12
	stop := make(chan struct{})
	flooding := time.Now()
	var wg sync.WaitGroup
	var attempts, admitted atomic.Int64
	for a := range addrs {
		for range perAddr / 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					var offer []gossh.Signer
					for range 5 {
						offer = append(offer, e.person(t, "", ""))
					}
					attempts.Add(5)
					if c, err := e.sshFrom(from(a), gossh.PublicKeys(offer...)); err == nil {
						admitted.Add(1)
						c.Close()
					}
				}
			})
		}
	}
	time.Sleep(time.Second) // the flood at full strength
	start := time.Now()
	for i, who := range []struct {
		name string
		src  *net.TCPAddr
		key  gossh.Signer
	}{{"alice, from her own address", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, alice}, {"bob, from a flooding address", from(0), bob}} {
		c, err := e.sshFrom(who.src, gossh.PublicKeys(who.key))
		if err != nil {
			t.Fatalf("%s cannot log in during the flood: %v", who.name, err)
		}
		if out, stderr, status := command(t, c, "regions"); status != 0 || !strings.Contains(out, "eu-west") {
			t.Errorf("%d: %s's command during the flood: status %d, %q, %q", i, who.name, status, out, stderr)
		}
		c.Close()
	}
	took := time.Since(start)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	elapsed := time.Since(flooding)
	if admitted.Load() != 0 {
		t.Errorf("%d flooding connections were let in", admitted.Load())
	}
	if took > 5*time.Second {
		t.Errorf("the operators' logins took %v during the flood", took)
	}
	// Each address: its burst, a refill a second, and the operators'
	// own lookups (login and session, each).
	finds := keys.finds.Load() - before
	bound := int64(addrs*(sshserve.Defaults.AuthBurst+int(elapsed.Seconds())+1) + 8)
	t.Logf("%d keys offered, %d looked up (bound %d), at most %d lookups at once", attempts.Load(), finds, bound, keys.most.Load())
	if finds > bound {
		t.Errorf("%d key lookups for %d keys offered from %d addresses in %v: want at most %d", finds, attempts.Load(), addrs, elapsed, bound)
	}
	if m := keys.most.Load(); m > 4 {
		t.Errorf("%d key lookups ran at once, bound 4", m)
	}
	e.nothingWritten(t, 2)
}

// A session that never reads what the console prints, stalled in its SSH
// channel (the client takes nothing: the 2 MB window fills) or in TCP
// (the client reads nothing from the socket at all). Its output stalls,
// ctrld's memory and goroutines stay bounded instead of queuing frames,
// and the session ends at its idle bound (it types nothing) all the same,
// connection closed; another person's console meanwhile redraws as usual.
func TestSSHConsoleSessionThatNeverReadsEndsAtItsBound(t *testing.T) {
	for _, stall := range []string{"channel", "tcp"} {
		t.Run(stall, func(t *testing.T) { testNeverReads(t, stall) })
	}
}

func testNeverReads(t *testing.T, stall string) {
	e := startSSH(t, sshserve.Config{IdleTimeout: 3 * time.Second, AuthTimeout: time.Second})
	// Many regions: a screen of rows, so each redraw is tens of KB.
	for i := range 250 {
		e.AgentToken(fmt.Sprintf("region-%03d-with-a-longer-name-than-usual", i))
	}
	alice := e.person(t, "alice", operatorkeys.Operator)
	bob := e.person(t, "bob", operatorkeys.Operator)

	bc, err := e.dial(gossh.PublicKeys(bob))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	bobs := openConsole(t, bc, 100, 30, nil)
	bobs.waitFor(t, "region-000")

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	raw, err := net.Dial("tcp", e.console.Addr())
	if err != nil {
		t.Fatal(err)
	}
	conn := &stallingConn{Conn: raw, resume: make(chan struct{})}
	defer conn.Close()
	cc, chans, reqs, err := gossh.NewClientConn(conn, e.console.Addr(), &gossh.ClientConfig{
		User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(alice)}, HostKeyCallback: gossh.FixedHostKey(e.hostKey)})
	if err != nil {
		t.Fatal(err)
	}
	c := gossh.NewClient(cc, chans, reqs)
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// Pipes that nobody reads: the client stops widening the window.
	stdout, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.StderrPipe(); err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestPty("xterm-256color", 256, 512, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	if stall == "tcp" {
		conn.stall()
	}

	// Resizes (no keystrokes: the session stays idle) make the console
	// draw its whole screen again: the window, or the sockets' buffers,
	// fill in a few seconds.
	opened := time.Now()
	peakG := 0
	for i := 0; time.Since(opened) < 2500*time.Millisecond; i++ {
		sess.WindowChange(256, 512-i%2) // blocks while TCP is stalled: from a goroutine
		peakG = max(peakG, runtime.NumGoroutine())
		time.Sleep(10 * time.Millisecond)
	}
	// What the stalled session holds: the live heap, its garbage gone.
	runtime.GC()
	var stalled runtime.MemStats
	runtime.ReadMemStats(&stalled)
	stillServes(t, bobs)

	// The server ends it at the idle bound and closes the connection.
	closed := make(chan struct{})
	go func() { e.waitLog(t, "ssh: session closed", 15*time.Second); close(closed) }()
	<-closed
	ended := time.Since(opened)
	conn.resumeReading()
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection of a session that read nothing stays open after the session ended")
	}
	printed, _ := io.Copy(io.Discard, stdout)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0+4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("ended after %v; the client took %d KB; goroutines %d before, %d at most, %d after; live heap %d MB before, %d MB while stalled",
		ended.Round(time.Millisecond), printed>>10, g0, peakG, runtime.NumGoroutine(), m0.HeapAlloc>>20, stalled.HeapAlloc>>20)
	if ended > 8*time.Second {
		t.Errorf("the session ended %v after it opened; idle bound 3s", ended)
	}
	if printed > 2<<20+64<<10 {
		t.Errorf("the client got %d KB without reading; want its 2 MB window at most", printed>>10)
	}
	if g := runtime.NumGoroutine(); g > g0+4 {
		t.Errorf("%d goroutines after the session ended, %d before it", g, g0)
	}
	// The session holds its console's screen and what the window or the
	// socket lets through, not every frame it drew. A console at 512×256
	// with these rows, resized as here, holds about 50-90 MB whether or
	// not its client reads, and 137 MB was seen while the machine's two
	// cores ran the whole suite: the bound is twice that, for a session
	// whose memory grows with what it draws.
	if stalled.HeapAlloc > m0.HeapAlloc+256<<20 {
		t.Errorf("live heap grew from %d MB to %d MB under a session that reads nothing", m0.HeapAlloc>>20, stalled.HeapAlloc>>20)
	}
	stillServes(t, bobs)
	e.nothingWritten(t, 2)
}

// stallingConn stops reading from the server once stalled, until resumed.
type stallingConn struct {
	net.Conn
	stalled atomic.Bool
	resume  chan struct{}
	once    sync.Once
}

func (c *stallingConn) stall() { c.stalled.Store(true) }

func (c *stallingConn) resumeReading() { c.once.Do(func() { close(c.resume) }) }

func (c *stallingConn) Read(p []byte) (int, error) {
	if c.stalled.Load() {
		<-c.resume
	}
	return c.Conn.Read(p)
}

// waitLog waits until the SSH server logged want.
func (e *sshEnv) waitLog(t *testing.T, want string, within time.Duration) {
	deadline := time.Now().Add(within)
	for !strings.Contains(e.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Errorf("the server never logged %q within %v", want, within)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A terminal request without a terminal type (TERM empty) still gets the
// console, plainly drawn; no terminal at all gets a clear refusal
// (TestSSHConsoleOddTerminals). Neither harms the other session.
func TestSSHConsolePtyWithoutATerminalType(t *testing.T) {
	e := startSSH(t, sshserve.Config{})
	e.AgentToken("eu-west")
	alice := e.person(t, "alice", operatorkeys.Operator)
	c, err := e.dial(gossh.PublicKeys(alice))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := openConsole(t, c, 80, 24, nil)
	other.waitFor(t, "eu-west")

	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("", 24, 80, nil); err != nil {
		t.Fatal(err)
	}
	con := &console{sess: sess, stdout: &screen{}, stderr: &screen{}, done: make(chan error, 1)}
	sess.Stdout, sess.Stderr = con.stdout, con.stderr
	if con.stdin, err = sess.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	go func() { con.done <- sess.Wait() }()
	con.waitFor(t, "eu-west")
	con.stdin.Write([]byte("q"))
	if status := con.ended(t, 5*time.Second); status != 0 {
		t.Errorf("status %d, stderr %q", status, con.stderr.String())
	}
	stillServes(t, other)
	e.nothingWritten(t, 1)
}
