package dispatch

import "github.com/prometheus/client_golang/prometheus"

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithPanics counts the panics recovered while applying a resource (see
// work) in panics, under where="dispatch".
func WithPanics(panics *prometheus.CounterVec) Option {
	return func(d *Dispatcher) { d.guard.Panics = panics }
}
