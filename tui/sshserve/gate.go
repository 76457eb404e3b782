package sshserve

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// connGate bounds connections that run no session yet (still in the
// handshake, or authenticated and not yet asking for a session), in all
// and per source address, like OpenSSH's MaxStartups: beyond a bound a new
// connection is closed at once, before it costs a handshake. Each such
// connection also has deadline to start a session, and again whenever its
// last session ends: a connection that sends nothing, or authenticates and
// opens nothing, or whose key was removed (its session ended), is closed.
// A connection running a session counts against the session bounds
// (sessionCounts) instead.
//
// A flood from many addresses fills the bound in all, and would keep
// everyone else out for as long as it lasts. So addresses a session
// started from in the last day (an operator's, a bastion's) have places
// of their own beyond it (reserve, each address still at most perAddr):
// a stranger's flood cannot take them, and a regular operator still gets
// in. An address is known from a session, which only a registered key
// opens, so strangers cannot make theirs known.
type connGate struct {
	deadline       time.Duration
	total, perAddr int
	reserve        int
	mu             sync.Mutex
	pending        int
	reserved       int // of the reserve, places taken
	pendingByAddr  map[string]int
	known          *expirable.LRU[string, struct{}]
}

// Known addresses: how many, and for how long after their last session.
const (
	knownAddresses = 4096
	knownFor       = 24 * time.Hour
)

func newConnGate(total, perAddr int, deadline time.Duration) *connGate {
	return &connGate{total: total, perAddr: perAddr, reserve: perAddr, deadline: deadline, pendingByAddr: map[string]int{},
		known: expirable.NewLRU[string, struct{}](knownAddresses, nil, knownFor)}
}

// admit wraps a new connection, or returns nil when a bound is reached.
func (g *connGate) admit(c net.Conn) *gatedConn {
	addr := addrKey(c.RemoteAddr())
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pendingByAddr[addr] >= g.perAddr {
		return nil
	}
	gc := &gatedConn{Conn: c, gate: g, addr: addr, pending: true}
	switch {
	case g.pending < g.total:
		g.pending++
	case g.reserved < g.reserve && g.known.Contains(addr):
		g.reserved++
		gc.reserved = true
	default:
		return nil
	}
	g.pendingByAddr[addr]++
	gc.timer = time.AfterFunc(g.deadline, func() { c.Close() })
	return gc
}

func (g *connGate) leave(addr string, reserved bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if reserved {
		g.reserved--
	} else {
		g.pending--
	}
	if g.pendingByAddr[addr]--; g.pendingByAddr[addr] <= 0 {
		delete(g.pendingByAddr, addr)
	}
}

// started notes that a session started from addr: it is known from now
// on (see connGate).
func (g *connGate) started(addr string) {
	g.known.Add(addr, struct{}{})
}

// gatedConn is a connection the gate let in.
type gatedConn struct {
	net.Conn
	gate *connGate
	addr string

	mu       sync.Mutex
	pending  bool // counted in the gate's pending bounds
	reserved bool // in its reserve, not in its bound in all
	sessions int
	channels int // session channels open, sessions or not (sessionChannel)
	closed   bool
	timer    *time.Timer
}

// openChannel counts a session channel in, or reports false when max are
// open already.
func (c *gatedConn) openChannel(max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.channels >= max {
		return false
	}
	c.channels++
	return true
}

// closeChannel counts a session channel out.
func (c *gatedConn) closeChannel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.channels--
}

// sessionStarted counts a session in: the connection leaves the pending
// bounds and its deadline stops while a session runs.
func (c *gatedConn) sessionStarted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions++
	c.timer.Stop()
	c.gate.started(c.addr)
	if c.pending {
		c.pending = false
		c.gate.leave(c.addr, c.reserved)
	}
}

// sessionEnded counts a session out; the last one restarts the deadline.
func (c *gatedConn) sessionEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions--; c.sessions == 0 && !c.closed {
		c.timer.Reset(c.gate.deadline)
	}
}

func (c *gatedConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.timer.Stop()
		if c.pending {
			c.pending = false
			c.gate.leave(c.addr, c.reserved)
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// addrKey is the source a bound counts by: the IPv4 address, or the IPv6
// /64 (one host is usually given a whole /64, so its addresses are one
// source).
func addrKey(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// keyLookups runs registry lookups for authentication a few at once (they
// are database queries on ctrld's pool: see invariant I8), and remembers
// for a few seconds which fingerprints were not registered.
//
// The memory is consulted only when every lookup slot is busy, that is
// under a flood: then a stranger retrying the same key costs no query. At
// any other time every lookup reads the registry, so a key added a moment
// ago logs in at once; under a flood it may wait unknownFor.
type keyLookups struct {
	slots      chan struct{}
	unknownFor time.Duration
	maxUnknown int

	mu      sync.Mutex
	unknown map[string]time.Time // fingerprint → until
}

func newKeyLookups(atOnce int) *keyLookups {
	return &keyLookups{slots: make(chan struct{}, atOnce), unknownFor: 3 * time.Second, maxUnknown: 10000, unknown: map[string]time.Time{}}
}

func (l *keyLookups) find(ctx interface {
	Done() <-chan struct{}
	Err() error
}, find func() (Identity, bool, error), fp string) (Identity, bool, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		if l.recentlyUnknown(fp, time.Now()) {
			return Identity{}, false, nil
		}
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return Identity{}, false, ctx.Err()
		}
	}
	defer func() { <-l.slots }()
	who, ok, err := find()
	if err == nil && !ok {
		l.noteUnknown(fp, time.Now())
	}
	return who, ok, err
}

func (l *keyLookups) recentlyUnknown(fp string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.unknown[fp]
	return ok && now.Before(until)
}

func (l *keyLookups) noteUnknown(fp string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.unknown) >= l.maxUnknown {
		for k, until := range l.unknown {
			if !now.Before(until) {
				delete(l.unknown, k)
			}
		}
		if len(l.unknown) >= l.maxUnknown {
			return // a flood of distinct keys: remembering more buys nothing
		}
	}
	l.unknown[fp] = now.Add(l.unknownFor)
}
