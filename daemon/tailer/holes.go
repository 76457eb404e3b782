package tailer

import (
	"slices"
	"sort"
	"time"
)

// hole is a run of pks, lo..hi inclusive, that are below the newest pk
// read but not visible yet, and when the tailer first missed them.
type hole struct {
	lo, hi uint64
	since  time.Time
}

// holeList is the open holes, ascending and disjoint. Holes are kept as
// runs so that a jump of the auto-increment counter by a million costs one
// entry, not a million.
type holeList []hole

// open records lo..hi as missed at since. Runs only ever open above every
// existing one (the tailer reads forward), which keeps the list sorted.
func (l *holeList) open(lo, hi uint64, since time.Time) {
	*l = append(*l, hole{lo: lo, hi: hi, since: since})
}

// settle removes pk, which became visible, splitting its run if needed.
func (l *holeList) settle(pk uint64) {
	holes := *l
	i := sort.Search(len(holes), func(i int) bool { return holes[i].hi >= pk })
	if i == len(holes) || holes[i].lo > pk {
		return
	}
	h := holes[i]
	switch {
	case h.lo == h.hi:
		*l = slices.Delete(holes, i, i+1)
	case pk == h.lo:
		holes[i].lo++
	case pk == h.hi:
		holes[i].hi--
	default:
		holes[i].hi = pk - 1
		*l = slices.Insert(holes, i+1, hole{lo: pk + 1, hi: h.hi, since: h.since})
	}
}

// oldest returns up to n runs, lowest first.
func (l holeList) oldest(n int) []hole {
	return append([]hole(nil), l[:min(n, len(l))]...)
}

// due returns up to n pks, lowest first, of the runs missed before cutoff.
func (l holeList) due(cutoff time.Time, n int) []uint64 {
	var pks []uint64
	for _, h := range l {
		if h.since.After(cutoff) {
			continue
		}
		for pk := h.lo; pk <= h.hi && len(pks) < n; pk++ {
			pks = append(pks, pk)
		}
		if len(pks) == n {
			break
		}
	}
	return pks
}

// pks counts the pks in all runs.
func (l holeList) pks() uint64 {
	var n uint64
	for _, h := range l {
		n += h.hi - h.lo + 1
	}
	return n
}
