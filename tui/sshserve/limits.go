package sshserve

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// authLimiter is the per-address budget of failed authentication
// attempts (a key the registry does not know). Only failures are charged:
// operators sharing an address (SNAT, a bastion, 127.0.0.1) do not spend
// each other's budget by logging in. While an address's budget is spent,
// a key offered from it is looked up only if this server found it
// registered before (registered, below): someone behind the same address
// as a flood still logs in with a key they used before, while the flood's
// new keys cost no query. A key registered since, never used here, waits
// for the budget to refill. Addresses are IPv4 addresses or IPv6 /64s
// (addrKey); the least recently seen are forgotten beyond a bound, one at
// a time, so a flood from many addresses neither grows the table nor
// wipes the other addresses' budgets.
//
// A lookup in flight holds one attempt of its address's budget until it
// answers (begin): checked first and charged after, concurrent
// connections from one address would each pass the check and spend the
// budget many times over.
type authLimiter struct {
	mu     sync.Mutex
	every  rate.Limit
	burst  int
	byAddr *simplelru.LRU[string, *addrBudget]
}

// addrBudget is one address's budget and its lookups in flight.
type addrBudget struct {
	lim      *rate.Limiter
	inFlight int
}

func newAuthLimiter(perSecond float64, burst, maxAddr int) *authLimiter {
	byAddr, err := simplelru.NewLRU[string, *addrBudget](maxAddr, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &authLimiter{every: rate.Limit(perSecond), burst: burst, byAddr: byAddr}
}

// budget is addr's entry, made when missing; l.mu is held.
func (l *authLimiter) budget(addr string) *addrBudget {
	b, ok := l.byAddr.Get(addr)
	if !ok {
		b = &addrBudget{lim: rate.NewLimiter(l.every, l.burst)}
		l.byAddr.Add(addr, b)
	}
	return b
}

// spent reports whether addr has no failed attempt left at now, counting
// the lookups in flight as failures.
func (l *authLimiter) spent(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.byAddr.Get(addr)
	return ok && b.lim.TokensAt(now)-float64(b.inFlight) < 1
}

// begin holds one attempt of addr's budget for a lookup about to run; ok
// is false (and nothing held) when the budget is spent. done ends the
// lookup, charging a failure when failed, whether or not ok.
func (l *authLimiter) begin(addr string, now time.Time) (done func(failed bool), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budget(addr)
	if b.lim.TokensAt(now)-float64(b.inFlight) < 1 {
		return func(failed bool) {
			if failed {
				l.fail(addr, time.Now())
			}
		}, false
	}
	b.inFlight++
	return func(failed bool) {
		l.mu.Lock()
		b.inFlight--
		l.mu.Unlock()
		if failed {
			l.fail(addr, time.Now())
		}
	}, true
}

// fail charges one failed attempt to addr.
func (l *authLimiter) fail(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.budget(addr).lim.AllowN(now, 1)
}

// registered remembers the fingerprints this server found registered, so
// that a spent address still looks them up (the lookup itself is never
// answered from here: a removed key fails at once).
type registered struct {
	mu  sync.Mutex
	fps *simplelru.LRU[string, struct{}]
}

func newRegistered(max int) *registered {
	fps, err := simplelru.NewLRU[string, struct{}](max, nil)
	if err != nil {
		panic(err)
	}
	return &registered{fps: fps}
}

func (r *registered) note(fp string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fps.Add(fp, struct{}{})
}

func (r *registered) seen(fp string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fps.Contains(fp)
}

// errTooManySessions refuses a session over a bound.
var errTooManySessions = errors.New("too many console sessions")

// sessionCounts bounds open sessions per key and in all.
type sessionCounts struct {
	mu            sync.Mutex
	perKey, total int
	byKey         map[string]int
	all           int
}

// admit counts a session of key in, or refuses it; release counts it out.
func (c *sessionCounts) admit(key string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all >= c.total {
		return nil, fmt.Errorf("%w: this server has %d open, its limit", errTooManySessions, c.all)
	}
	if c.byKey[key] >= c.perKey {
		return nil, fmt.Errorf("%w: your key has %d open, its limit; close one first", errTooManySessions, c.byKey[key])
	}
	c.all++
	c.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.all--
			if c.byKey[key]--; c.byKey[key] == 0 {
				delete(c.byKey, key)
			}
		})
	}, nil
}
