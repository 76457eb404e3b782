package dispatch

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithPanics counts the panics recovered from the handler in panics,
// under where="dispatch".
func WithPanics(panics *prometheus.CounterVec) Option {
	return func(d *Dispatcher) { d.guard.Panics = panics }
}

// handle applies one resource's intent. A panic in the handler is one
// failed apply of that resource: logged with its stack, counted, and
// retried with backoff like any other failure (it shows as the agent's
// last error meanwhile), while the worker goes on with other resources.
// The handler's own defers have run by then; the dispatcher's lock is
// never held across it.
func (d *Dispatcher) handle(ctx context.Context, key Key, in Intent) error {
	return d.guard.Run("dispatch", func() error { return d.handler.Handle(ctx, key, in) })
}
