package tailer

import (
	"context"
	"sync"

	"github.com/deploysync/deploysync/daemon/changelog"
)

// Subscription receives one region's changes from the tailer.
type Subscription struct {
	tailer *Tailer
	region string
	ch     chan Notice

	// Watermark is W when the subscription began: changes at or below it
	// must be read from the database, those above arrive here.
	Watermark uint64
	// Early are the region's visible changes above Watermark that were
	// read before the subscription began.
	Early []changelog.Change
	// Control is the region's control state when the subscription began.
	Control RegionControl

	once sync.Once
	err  error
}

// Subscribe starts delivering region's changes. Together, the database up
// to Watermark, Early and the notices on C cover every change: nothing
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
	s := &Subscription{
		tailer:    t,
		region:    region,
		ch:        make(chan Notice, t.cfg.SubscriberBuffer),
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

// C delivers notices; it is closed when the subscription ends (see Err).
func (s *Subscription) C() <-chan Notice { return s.ch }

// Err says why C was closed: ErrSlowSubscriber, or the tailer stopping.
func (s *Subscription) Err() error {
	s.tailer.mu.Lock()
	defer s.tailer.mu.Unlock()
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.tailer.mu.Lock()
	defer s.tailer.mu.Unlock()
	delete(s.tailer.subs, s)
	s.tailer.metrics.Subscriptions.Set(float64(len(s.tailer.subs)))
	s.closeWith(nil)
}

// closeWith closes C once. Called with the tailer's mu held.
func (s *Subscription) closeWith(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.ch)
	})
}
