package agent

import (
	"errors"
	"sync"

	"github.com/deploysync/deploysync/agentd/watch"
)

// Readiness answers /readyz: is this replica doing its job? A replica that
// stands by for the region's Lease is (it is ready to take over); the
// replica that applies is once its stream is up and has completed a full
// sync. A nil *Readiness ignores every update.
type Readiness struct {
	mu       sync.Mutex
	standing bool           // leader election on, not leading
	watcher  *watch.Watcher // the active agent's stream
}

// Ready is nil when the replica is ready, else what it waits for.
func (r *Readiness) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.watcher != nil:
		return r.watcher.Ready()
	case r.standing:
		return nil
	}
	return errors.New("starting")
}

func (r *Readiness) standBy() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.standing = true
	r.mu.Unlock()
}

func (r *Readiness) activate(w *watch.Watcher) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.watcher = w
	r.mu.Unlock()
}

// deactivate ends the active agent: back to standing by under leader
// election, else not ready (the agent has stopped).
func (r *Readiness) deactivate(electing bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.watcher, r.standing = nil, electing
	r.mu.Unlock()
}
