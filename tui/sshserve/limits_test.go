package sshserve

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestAuthLimiterBudgetPerAddress(t *testing.T) {
	l := newAuthLimiter(1, 3, 100)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if l.spent("198.51.100.1", now) {
			t.Fatalf("spent after %d failures of a budget of 3", i)
		}
		l.fail("198.51.100.1", now)
	}
	if !l.spent("198.51.100.1", now) {
		t.Fatal("not spent after 3 failures of a budget of 3")
	}
	if l.spent("198.51.100.2", now) {
		t.Fatal("another address shares the first one's budget")
	}
	if l.spent("198.51.100.1", now.Add(time.Second)) {
		t.Fatal("the budget does not refill")
	}
}

// Lookups in flight hold their attempt: concurrent connections from one
// address cannot all pass the check before any is charged.
func TestAuthLimiterHoldsLookupsInFlight(t *testing.T) {
	l := newAuthLimiter(0.001, 3, 100)
	now := time.Unix(1000, 0)
	var dones []func(bool)
	for i := range 3 {
		done, ok := l.begin("198.51.100.1", now)
		if !ok {
			t.Fatalf("lookup %d of a budget of 3 refused", i+1)
		}
		dones = append(dones, done)
	}
	if _, ok := l.begin("198.51.100.1", now); ok {
		t.Fatal("a fourth lookup began while three of a budget of 3 were in flight")
	}
	dones[0](false) // a registered key: costs nothing
	if _, ok := l.begin("198.51.100.1", now); !ok {
		t.Fatal("a registered key's lookup kept its attempt")
	}
	dones[1](true) // unknown: charged
	dones[2](true)
	if !l.spent("198.51.100.1", now) {
		t.Fatal("not spent after two failures and a lookup in flight of a budget of 3")
	}
}

// A flood from many addresses (each attempt from a new one) keeps the
// table bounded, and forgets the least recently seen addresses one by one,
// not every address at once.
func TestAuthLimiterForgetsAddresses(t *testing.T) {
	l := newAuthLimiter(0.001, 1, 100)
	now := time.Unix(1000, 0)
	l.fail("198.51.100.1", now)
	for i := range 1000 {
		l.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
		l.spent("198.51.100.1", now) // still seen: kept
	}
	if n := l.byAddr.Len(); n > 100 {
		t.Fatalf("%d addresses kept, bound 100", n)
	}
	if !l.spent("198.51.100.1", now) {
		t.Fatal("a flood from other addresses reset a spent address's budget")
	}
}

func TestSessionCounts(t *testing.T) {
	c := &sessionCounts{perKey: 2, total: 3, byKey: map[string]int{}}
	a1, err := c.admit("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admit("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admit("a"); !errors.Is(err, errTooManySessions) {
		t.Fatalf("third session of a key (bound 2): %v", err)
	}
	if _, err := c.admit("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admit("c"); !errors.Is(err, errTooManySessions) {
		t.Fatalf("fourth session in all (bound 3): %v", err)
	}
	a1()
	a1() // twice counts once
	if c.all != 2 || c.byKey["a"] != 1 {
		t.Fatalf("after one release: %d in all, %d of a; want 2 and 1", c.all, c.byKey["a"])
	}
	if _, err := c.admit("c"); err != nil {
		t.Fatalf("a freed slot is not reused: %v", err)
	}
}

// A session's idle check ticks at a positive interval whatever the
// timeout: time.NewTicker panics on zero, in a goroutine no recover covers.
func TestIdleCheckIntervalIsPositive(t *testing.T) {
	for _, idle := range []time.Duration{1, 3, 4, time.Millisecond, 2 * time.Second, time.Hour} {
		if got := idleCheckEvery(idle); got <= 0 || got > time.Second {
			t.Errorf("idle timeout %v: checks every %v", idle, got)
		}
	}
}
