package tailer

import (
	"cmp"
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

// DefaultUnavailableAfter is Config.UnavailableAfter's default: long enough
// that a database restart or a failover of a few seconds ends no stream,
// short enough that agents leave a replica that lost its database node
// well before anyone would notice them missing changes.
const DefaultUnavailableAfter = 5 * time.Second

// failureLogEvery spaces out the log lines of polls that keep failing.
const failureLogEvery = 10 * time.Second

// notePoll records a poll's outcome at now: the first failure starts the
// clock, failures for UnavailableAfter make the tailer unavailable (every
// subscription ends, Subscribe refuses), and the first success makes it
// available again. The availability hook, when set, hears of each switch.
func (t *Tailer) notePoll(err error, now time.Time) {
	if err != nil && now.Sub(t.failureLogged) >= failureLogEvery {
		// The first failure of a run of them, then one line per
		// failureLogEvery: a database away for an hour must not write ten
		// lines a second.
		t.failureLogged = now
		t.log.Warn("tailer: poll failed; retrying", "err", err, "failing_for", now.Sub(cmp.Or(t.failingSince, now)).Round(time.Millisecond))
	}
	t.mu.Lock()
	var switched, available bool
	switch {
	case err == nil:
		t.failingSince, t.failureLogged = time.Time{}, time.Time{}
		if t.unavailable {
			t.unavailable, switched, available = false, true, true
		}
	case t.failingSince.IsZero():
		t.failingSince = now
	case !t.unavailable && now.Sub(t.failingSince) >= t.cfg.UnavailableAfter:
		t.unavailable, switched = true, true
		t.closeAll(ErrDatabaseUnavailable)
	}
	t.mu.Unlock()
	if !switched {
		return
	}
	if available {
		t.log.Info("tailer: the database answers again; taking streams")
	} else {
		t.log.Error("tailer: cannot read the change log; ended every stream and refusing new ones until it can", "failing_for", now.Sub(t.failingSince).Round(time.Millisecond), "err", err)
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
