package recovery

import (
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
}

// RestartPause is how long Loop waits before starting a loop again that
// panicked: a bug that panics on every round must not spin a core or
// flood the log.
const RestartPause = time.Second

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

// Loop runs f until ctx ends, starting it again RestartPause after it
// panics. Only for loops that keep no state between rounds that a panic
// could leave half-updated: a new f starts as the first one did.
func (g Guard) Loop(ctx context.Context, where string, f func(context.Context)) {
	for {
		err := g.Run(where, func() error { f(ctx); return nil })
		if err == nil || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(RestartPause):
		}
	}
}
