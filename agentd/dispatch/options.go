package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithPanics counts the panics recovered while applying a resource (see
// work) in panics, under where="dispatch".
func WithPanics(panics *prometheus.CounterVec) Option {
	return func(d *Dispatcher) { d.guard.Panics = panics }
}

// WithRefusedRetry spaces the retries of refused (Terminal) intents from
// lo, doubling up to hi, instead of RefusedRetryMin and RefusedRetryMax
// (for tests).
func WithRefusedRetry(lo, hi time.Duration) Option {
	return func(d *Dispatcher) { d.refusedDelay = workqueue.NewTypedItemExponentialFailureRateLimiter[Key](lo, hi) }
}
