package sshserve

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestAuthLimiterBudgetPerAddress(t *testing.T) {
	l := newAuthLimiter(1, 3)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if !l.allow("198.51.100.1", now) {
			t.Fatalf("attempt %d of a budget of 3 refused", i+1)
		}
	}
	if l.allow("198.51.100.1", now) {
		t.Fatal("a fourth attempt at once was allowed")
	}
	if !l.allow("198.51.100.2", now) {
		t.Fatal("another address shares the first one's budget")
	}
	if !l.allow("198.51.100.1", now.Add(time.Second)) {
		t.Fatal("the budget does not refill")
	}
}

// A flood from many addresses (each attempt from a new one) keeps the
// table bounded.
func TestAuthLimiterForgetsAddresses(t *testing.T) {
	l := newAuthLimiter(1, 3)
	l.maxAddr = 100
	now := time.Unix(1000, 0)
	for i := range 1000 {
		l.allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(l.byAddr); n > l.maxAddr {
		t.Fatalf("%d addresses kept, bound %d", n, l.maxAddr)
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
