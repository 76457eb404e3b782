package sshserve

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// authLimiter limits authentication attempts per source address: each
// address has a token bucket; addresses not seen for a while are forgotten
// so a flood from many addresses cannot grow the map without bound.
type authLimiter struct {
	mu      sync.Mutex
	every   rate.Limit
	burst   int
	byAddr  map[string]*addrLimit
	maxAddr int
}

type addrLimit struct {
	lim  *rate.Limiter
	seen time.Time
}

func newAuthLimiter(perSecond float64, burst int) *authLimiter {
	return &authLimiter{every: rate.Limit(perSecond), burst: burst, byAddr: map[string]*addrLimit{}, maxAddr: 10000}
}

// allow takes one attempt from host's bucket.
func (l *authLimiter) allow(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.byAddr[host]
	if !ok {
		if len(l.byAddr) >= l.maxAddr {
			l.forget(now)
		}
		a = &addrLimit{lim: rate.NewLimiter(l.every, l.burst)}
		l.byAddr[host] = a
	}
	a.seen = now
	return a.lim.AllowN(now, 1)
}

// forget drops addresses whose bucket has refilled (they lose nothing by
// starting over), and if that is not enough, every address.
func (l *authLimiter) forget(now time.Time) {
	full := time.Duration(float64(l.burst) / float64(l.every) * float64(time.Second))
	for host, a := range l.byAddr {
		if now.Sub(a.seen) > full {
			delete(l.byAddr, host)
		}
	}
	if len(l.byAddr) >= l.maxAddr {
		clear(l.byAddr)
	}
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
