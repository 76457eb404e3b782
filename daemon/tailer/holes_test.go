package tailer

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The run list agrees with a plain set of pks under random opens and
// settles, and hands out due pks lowest first.
func TestHoleListMatchesASetOfPks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l holeList
	set := map[uint64]bool{}
	var top uint64
	t0 := time.Unix(0, 0)
	for step := range 20000 {
		if rng.IntN(3) == 0 {
			lo := top + 1 + uint64(rng.IntN(3))
			hi := lo + uint64(rng.IntN(20))
			l.open(lo, hi, t0.Add(time.Duration(step)))
			for pk := lo; pk <= hi; pk++ {
				set[pk] = true
			}
			top = hi + 1
		} else if top > 0 {
			pk := uint64(rng.IntN(int(top))) + 1
			l.settle(pk)
			delete(set, pk)
		}
		if l.pks() != uint64(len(set)) {
			t.Fatalf("step %d: runs hold %d pks, the set %d", step, l.pks(), len(set))
		}
		for i, h := range l {
			if h.lo > h.hi || (i > 0 && l[i-1].hi >= h.lo) {
				t.Fatalf("step %d: runs not ascending and disjoint: %+v", step, l)
			}
			if !set[h.lo] || !set[h.hi] {
				t.Fatalf("step %d: run %d..%d ends on a settled pk", step, h.lo, h.hi)
			}
		}
	}
	due := l.due(t0.Add(time.Hour), 50)
	for i, pk := range due {
		if !set[pk] || (i > 0 && due[i-1] >= pk) {
			t.Fatalf("due pks %v: not open or not ascending", due)
		}
	}
	if len(due) != min(50, len(set)) {
		t.Fatalf("want %d due pks, got %d", min(50, len(set)), len(due))
	}
	if got := l.due(t0.Add(-time.Second), 50); len(got) != 0 {
		t.Fatalf("runs missed after the cutoff are not due yet, got %v", got)
	}
}
