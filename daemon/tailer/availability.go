package tailer

import (
	"cmp"
	"context"
	"errors"
	"time"
)

// ErrDatabaseUnavailable closes every subscription when the tailer has not
// been able to read the change log for Config.UnavailableAfter, and refuses
// new ones until it can again. Its streams would otherwise stay open and
// silent for as long as the database is away, their agents seeing nothing
// and suspecting nothing; ended, they reconnect, and behind a load balancer
// reach a replica whose database answers (another node of a multi-primary
// cluster), or come back here once this one's does.
var ErrDatabaseUnavailable = errors.New("ctrld cannot read its database; reconnect (to another replica if there is one) from the last bookmark")

// DefaultUnavailableAfter is what ctrld sets Config.UnavailableAfter to on
// a node of a multi-primary (Galera) cluster, where a replica that lost its
// node leaves others that can read: long enough that a blip ends no
// stream, short enough that agents leave well before anyone would miss
// changes. On a single database server ctrld leaves it off: no replica
// could serve meanwhile, and ending streams would only delay the agents'
// return once the database is back.
const DefaultUnavailableAfter = 5 * time.Second

// stuckAfter bounds each of the tailer's database rounds when
// UnavailableAfter is off: a statement on a connection whose server went
// away without a reset would otherwise wait until the kernel gives up on
// the connection (about 15 minutes), every stream silent meanwhile; cut
// short, it fails and is tried again on a fresh connection. No poll,
// region read or watermark write of a database that answers comes near it.
const stuckAfter = 30 * time.Second

// within bounds one database round of the tailer's (a poll, a region
// read, a watermark write) by UnavailableAfter, or stuckAfter when that is
// off. A database that hangs rather than refuses (a host gone without a
// reset, a Galera node's causal read waiting for a cluster it lost) must
// fail the round in time, not hold the tailer's one loop: a region read
// that hung would keep every later poll from running, and so from noticing.
func (t *Tailer) within(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(t.cfg.UnavailableAfter, stuckAfter))
}

// pollWithin polls, its reads bounded by within (the filler it may start
// runs under ctx: it outlives the poll).
func (t *Tailer) pollWithin(ctx context.Context) (more bool, err error) {
	reads, cancel := t.within(ctx)
	defer cancel()
	return t.poll(reads, ctx)
}

// boundedRun runs one of the tailer's side rounds (region control, the
// watermark's persistence) within its bound, as a guarded unit: a panic in
// it is that round's failure, not a reason to end every stream.
func (t *Tailer) boundedRun(ctx context.Context, name string, round func(context.Context) error) error {
	return t.guard.Run(name, func() error {
		bounded, cancel := t.within(ctx)
		defer cancel()
		return round(bounded)
	})
}

// failureLogEvery spaces out the log lines of database rounds that keep
// failing.
const failureLogEvery = 10 * time.Second

// logThrottle spaces one kind of log line failureLogEvery apart.
type logThrottle struct{ last time.Time }

// due reports whether a line may be written at now, and if so counts it.
func (l *logThrottle) due(now time.Time) bool {
	if now.Sub(l.last) < failureLogEvery {
		return false
	}
	l.last = now
	return true
}

// notePoll records a poll's outcome at now: a failure UnavailableAfter or
// more after the last success makes the tailer unavailable (every
// subscription ends, Subscribe refuses), and the first success makes it
// available again. The availability hook, when set, hears of each switch.
func (t *Tailer) notePoll(err error, now time.Time) {
	// The first failure of a run of them, then one line per
	// failureLogEvery: a database away for an hour must not write ten
	// lines a second, nor one that answers every other poll (so a success
	// does not reset it).
	if err != nil && t.pollLog.due(now) {
		t.log.Warn("tailer: poll failed; retrying", "err", err, "failing_for", now.Sub(cmp.Or(t.failingSince, now)).Round(time.Millisecond))
	}
	t.mu.Lock()
	var switched, available bool
	if err == nil {
		t.failingSince, t.lastPollOK = time.Time{}, now
		if t.unavailable {
			t.unavailable, switched, available = false, true, true
		}
	} else {
		if t.failingSince.IsZero() {
			t.failingSince = now
		}
		// Counted from the last poll that succeeded, not the first that
		// failed: a poll that hung for UnavailableAfter is enough.
		if t.cfg.UnavailableAfter > 0 && !t.unavailable && now.Sub(t.lastPollOK) >= t.cfg.UnavailableAfter {
			t.unavailable, switched = true, true
			t.closeAll(ErrDatabaseUnavailable)
		}
	}
	t.mu.Unlock()
	if !switched {
		return
	}
	if available {
		t.log.Info("tailer: the database answers again; taking streams")
	} else {
		t.log.Error("tailer: cannot read the change log; ended every stream and refusing new ones until it can", "last_read", now.Sub(t.lastPollOK).Round(time.Millisecond), "err", err)
	}
	t.announce(available)
}

// announce tells the availability hook, if any, that the tailer is
// available or not.
func (t *Tailer) announce(available bool) {
	t.mu.Lock()
	hook := t.onAvailability
	t.mu.Unlock()
	if hook != nil {
		hook(available)
	}
}

// OnAvailability sets a function told when the tailer has started (true),
// and then each time it becomes unavailable (false) or available again
// (true), e.g. to keep the replica out of its load balancer meanwhile. Set
// it before Run.
func (t *Tailer) OnAvailability(hook func(available bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onAvailability = hook
}
