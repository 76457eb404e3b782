package recovery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Panic is a recovered panic.
type Panic struct {
	// Where names the unit of work that panicked.
	Where string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (p *Panic) Error() string { return fmt.Sprintf("panic in %s: %v", p.Where, p.Value) }

// Guard recovers panics, logs them and counts them.
type Guard struct {
	// Log receives each panic with its stack (default slog.Default()).
	Log *slog.Logger
	// Panics, labelled by where, counts them (nil: not counted).
	Panics *prometheus.CounterVec
	// RestartPause is Loop's first pause after a panic (default
	// DefaultRestartPause).
	RestartPause time.Duration
}

// DefaultRestartPause is how long Loop waits before starting a loop again
// that panicked. The pause doubles with every panic in a row, up to
// maxPauses times it: a bug that panics on every round (a poison row, say)
// must not spin a core, flood the log, or make everything that depends on
// the loop start over every second.
const DefaultRestartPause = time.Second

const maxPauses = 60

// Backoff spaces out retries after failures: Min, then twice as long each
// time, up to Max. Reset starts over at Min.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Next returns the pause before the next retry.
func (b *Backoff) Next() time.Duration {
	d := max(b.next, b.Min)
	b.next = min(2*d, b.Max)
	return d
}

// Reset makes the next pause Min again.
func (b *Backoff) Reset() { b.next = 0 }

// Backoff returns the backoff Loop uses after panics.
func (g Guard) Backoff() *Backoff {
	pause := cmp.Or(g.RestartPause, DefaultRestartPause)
	return &Backoff{Min: pause, Max: maxPauses * pause}
}

// Run calls f. A panic in f is recovered, logged, counted under where and
// returned as a *Panic; otherwise Run returns f's error.
func (g Guard) Run(where string, f func() error) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		p := &Panic{Where: where, Value: v, Stack: debug.Stack()}
		log := g.Log
		if log == nil {
			log = slog.Default()
		}
		log.Error("recovered a panic", "where", where, "panic", fmt.Sprint(v), "stack", string(p.Stack))
		if g.Panics != nil {
			g.Panics.WithLabelValues(where).Inc()
		}
		err = p
	}()
	return f()
}

// Loop runs f until ctx ends, starting it again after it panics (see
// DefaultRestartPause). Only for loops that keep no state between rounds
// that a panic could leave half-updated: a new f starts as the first one
// did. LoopResetting is for the others.
func (g Guard) Loop(ctx context.Context, where string, f func(context.Context)) {
	g.LoopResetting(ctx, where, f, nil)
}

// LoopResetting is Loop for a loop whose state a panic may leave
// half-updated: reset (if not nil) runs after each panic, before f starts
// again. A round that ran longer than the longest pause counts as healthy:
// the pause after its panic starts short again.
func (g Guard) LoopResetting(ctx context.Context, where string, f func(context.Context), reset func()) {
	backoff := g.Backoff()
	for {
		began := time.Now()
		err := g.Run(where, func() error { f(ctx); return nil })
		if err == nil || ctx.Err() != nil {
			return
		}
		if reset != nil {
			reset()
		}
		if time.Since(began) > backoff.Max {
			backoff.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Next()):
		}
	}
}
