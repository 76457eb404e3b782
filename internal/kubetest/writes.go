package kubetest

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// WriteCounter counts the requests that change state (anything but GET)
// made through the client configs it wraps: a no-op apply must count none.
type WriteCounter struct {
	// Ignore, if set, leaves matching requests uncounted (leader
	// election's lease renewals, say).
	Ignore func(*http.Request) bool
	writes atomic.Int64
}

// Wrap returns a copy of cfg whose writes w counts.
func (w *WriteCounter) Wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet && (w.Ignore == nil || !w.Ignore(r)) {
				w.writes.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	return c
}

// Writes is how many writes were counted so far.
func (w *WriteCounter) Writes() int64 { return w.writes.Load() }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
