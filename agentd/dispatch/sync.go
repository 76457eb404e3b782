package dispatch

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Sync is one resource's apply state, as the agent reports it to ctrld
// (ReportResourceSync).
type Sync struct {
	Key Key
	// AppliedVersion is the stream version of the last event applied for
	// the resource (0: none since the agent started, or it is deleted).
	AppliedVersion uint64
	// ReceivedVersion is the stream version of the newest intent received
	// for the resource, the one InSync and Err are about (0 for a delete
	// garbage collection made up). A new intent is news even when its
	// apply fails the same way as the last one did.
	ReceivedVersion uint64
	// InSync: the newest intent received for the resource is applied
	// (not failing, nor refused for good).
	InSync bool
	// Err is the failing apply's error; empty once an apply succeeds.
	Err string
	// FailingSince is when the resource's applies began failing.
	FailingSince time.Time
	// Deleted: the resource's delete was applied, from the stream or by
	// garbage collection.
	Deleted bool
}

func (s Sync) same(o Sync) bool {
	return s.Key == o.Key && s.AppliedVersion == o.AppliedVersion && s.ReceivedVersion == o.ReceivedVersion && s.InSync == o.InSync &&
		s.Err == o.Err && s.FailingSince.Equal(o.FailingSince) && s.Deleted == o.Deleted
}

// Syncs returns, sorted by key, the state of every resource whose state
// changed since ctrld last took a report on it, and forgets that they
// changed: the caller reports them, then hands each back to Reported
// (ctrld took it) or Unreported (it did not, so the next call returns it
// again). A resource that changed and changed back (a drift repair) is
// not returned; one a full sync sent again is, when the sync's version
// moved (full-sync events carry the sync's version, and ctrld counts a
// report only while no change of the resource is newer than it).
func (d *Dispatcher) Syncs() []Sync {
	syncs := d.takeSyncs()
	// Sorted outside the lock the watch loop and the apply workers need.
	slices.SortFunc(syncs, func(a, b Sync) int {
		return cmp.Or(strings.Compare(a.Key.Kind, b.Key.Kind), strings.Compare(a.Key.ID, b.Key.ID))
	})
	return syncs
}

// takeSyncs is Syncs, unsorted, under the lock.
func (d *Dispatcher) takeSyncs() []Sync {
	d.mu.Lock()
	defer d.mu.Unlock()
	syncs := make([]Sync, 0, len(d.dirty))
	for k := range d.dirty {
		if s := d.syncOf(k); !s.same(d.reported[k]) {
			syncs = append(syncs, s)
		}
	}
	clear(d.dirty)
	return syncs
}

// syncOf is key's state. Called with mu held.
func (d *Dispatcher) syncOf(key Key) Sync {
	_, pending := d.pending[key]
	intent, desired := d.desired[key]
	f, failing := d.failures[key]
	// A refused intent (Terminal) is pending no more, and not in sync
	// either: it stays failing until an apply succeeds.
	s := Sync{Key: key, AppliedVersion: d.appliedVersion[key], ReceivedVersion: intent.Event.GetVersion(), InSync: !pending && !failing, Deleted: !desired}
	if failing {
		s.Err, s.FailingSince = f.err.Error(), f.since
	}
	return s
}

// Reported records that ctrld took syncs. Once it took a delete it has
// forgotten the resource, and so does the dispatcher.
func (d *Dispatcher) Reported(syncs []Sync) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range syncs {
		if s.Deleted {
			delete(d.reported, s.Key)
		} else {
			d.reported[s.Key] = s
		}
	}
}

// Unreported marks syncs, which ctrld did not take, to be returned by the
// next Syncs again.
func (d *Dispatcher) Unreported(syncs []Sync) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range syncs {
		d.dirty[s.Key] = true
	}
}
