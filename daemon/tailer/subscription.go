package tailer

import (
	"context"
	"sync"

	"github.com/deploysync/deploysync/daemon/changelog"
)

// Subscription receives one region's changes from the tailer.
//
// Notices wait in a slice that only holds what is undelivered, not in a
// buffered channel: an idle stream then costs a few hundred bytes instead
// of a channel of SubscriberBuffer notices allocated up front (190 KiB
// each, 2 GiB for 10,000 agents). The bound is the same: a subscriber
// with SubscriberBuffer undelivered notices is dropped.
type Subscription struct {
	tailer *Tailer
	region string
	// ready holds a token while notices may wait or once the
	// subscription has ended.
	ready chan struct{}

	// Watermark is W when the subscription began: changes at or below it
	// must be read from the database, those above arrive here.
	Watermark uint64
	// Early are the region's visible changes above Watermark that were
	// read before the subscription began.
	Early []changelog.Change
	// Control is the region's control state when the subscription began.
	Control RegionControl

	mu      sync.Mutex
	waiting []Notice // undelivered, oldest first
	ended   bool
	err     error
}

// Subscribe starts delivering region's changes. Together, the database up
// to Watermark, Early and the notices Take returns cover every change: nothing
// falls between them. It waits until the tailer has started.
func (t *Tailer) Subscribe(ctx context.Context, region string) (*Subscription, error) {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil, ErrStopped
	}
	if t.unavailable {
		return nil, ErrDatabaseUnavailable
	}
	s := &Subscription{
		tailer:    t,
		region:    region,
		ready:     make(chan struct{}, 1),
		Watermark: t.watermark,
		Control:   t.control[region],
	}
	for _, c := range t.early {
		if c.Region == region {
			s.Early = append(s.Early, c)
		}
	}
	t.subs[s] = struct{}{}
	t.metrics.Subscriptions.Set(float64(len(t.subs)))
	return s, nil
}

// Ready is signalled when notices may wait or the subscription has
// ended: then call Take. (A signal may find nothing waiting.)
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Take returns up to max of the waiting notices, oldest first (none when
// nothing waits), and ok false once the subscription has ended (see Err):
// notices still waiting then are dropped, as the stream ends and its
// client resumes from its last bookmark.
func (s *Subscription) Take(max int) (notices []Notice, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, false
	}
	n := min(max, len(s.waiting))
	notices = s.waiting[:n:n]
	if n == len(s.waiting) {
		s.waiting = nil // let the delivered notices go
	} else {
		s.waiting = s.waiting[n:]
		s.signal()
	}
	return notices, true
}

// Err says why the subscription ended: ErrSlowSubscriber, or the tailer
// stopping; nil while it has not (or Close ended it).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.tailer.mu.Lock()
	defer s.tailer.mu.Unlock()
	delete(s.tailer.subs, s)
	s.tailer.metrics.Subscriptions.Set(float64(len(s.tailer.subs)))
	s.endWith(nil)
}

// deliver queues n, without ever blocking the tailer; false when the
// subscriber has limit notices undelivered already, and must be dropped.
func (s *Subscription) deliver(n Notice, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return true
	}
	if len(s.waiting) >= limit {
		return false
	}
	s.waiting = append(s.waiting, n)
	s.signal()
	return true
}

// endWith ends the subscription once, saying why.
func (s *Subscription) endWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended, s.err, s.waiting = true, err, nil
	s.signal()
}

// signal leaves a token on ready unless one is there. Called with mu held.
func (s *Subscription) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}
