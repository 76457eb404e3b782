package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/internal/validate"
)

// Tailer is this process's tailer, as far as peers are concerned.
type Tailer interface {
	// Poke asks for a poll now.
	Poke()
	// RefreshControl reads the regions' pause and resync state now.
	RefreshControl(ctx context.Context) error
}

// Replica is this ctrld process as its peers know it: its row in
// ctrld_replicas, the pokes it sends its peers after a local write (it is
// the operator service's notifier), and the PeerService that obeys pokes
// carrying its secret (Service). Create it with New and run it with Run.
type Replica struct {
	client  *ent.Client
	cfg     Config
	self    *ent.CtrldReplica
	local   Tailer
	log     *slog.Logger
	guard   recovery.Guard
	metrics *metrics

	mu    sync.RWMutex
	peers map[string]*peer // by row ID

	// views answers peers' live views (ServeLiveViews); nil: none.
	views atomic.Pointer[LocalViews]
}

// New returns this process's replica, reachable at address (see
// ResolveAdvertiseAddr), with a fresh ID and secret. Its metrics go to reg.
func New(client *ent.Client, address, instance string, cfg Config, local Tailer, reg prometheus.Registerer, guard recovery.Guard, log *slog.Logger) (*Replica, error) {
	cfg.defaults()
	id, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	secret, err := randomHex(32)
	if err != nil {
		return nil, err
	}
	return &Replica{
		client:  client,
		cfg:     cfg,
		self:    &ent.CtrldReplica{ID: id, Instance: validate.Clip(instance, 255), Address: address, Secret: secret},
		local:   local,
		log:     log.With("replica", id),
		guard:   guard,
		metrics: newMetrics(reg),
		peers:   map[string]*peer{},
	}, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random replica identity: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ID is this replica's row ID.
func (r *Replica) ID() string { return r.self.ID }

// Run registers this replica, heartbeats it and follows its peers until
// ctx ends, then deletes its row (so peers stop poking it) and stops its
// pokes. A database error is logged and tried again at the next
// heartbeat; meanwhile peers' polls deliver what pokes would have hastened.
func (r *Replica) Run(ctx context.Context) {
	defer r.unregister()
	defer r.follow(nil)
	beat := time.NewTicker(r.cfg.Heartbeat)
	defer beat.Stop()
	forget := time.NewTicker(r.cfg.ForgetAfter)
	defer forget.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
		case <-forget.C:
			n, err := forgetSilent(ctx, r.client, r.cfg.ForgetAfter)
			if err != nil && ctx.Err() == nil {
				r.log.Warn("peers: deleting silent replicas' rows failed", "err", err)
			} else if n > 0 {
				r.log.Info("peers: deleted the rows of replicas silent for too long", "rows", n, "silent_for", r.cfg.ForgetAfter)
			}
		}
	}
}

// round heartbeats and reads the live peers.
func (r *Replica) round(ctx context.Context) {
	if err := heartbeat(ctx, r.client, r.self); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("peers: heartbeat failed; peers may stop poking this replica", "err", err)
		}
		return
	}
	rows, err := livePeers(ctx, r.client, r.self.ID, r.cfg.PeerTTL)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("peers: reading live replicas failed; poking the ones known", "err", err)
		}
		return
	}
	r.follow(rows)
}

// unregister deletes this replica's row, on a context of its own: Run's
// has ended.
func (r *Replica) unregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := unregister(ctx, r.client, r.self.ID); err != nil {
		r.log.Warn("peers: deleting this replica's row failed; peers poke it until it is silent for a while", "err", err, "ttl", r.cfg.PeerTTL)
	}
}

// Address is where peers dial this replica.
func (r *Replica) Address() string { return r.self.Address }

// Peers is how many replicas this one pokes after a write.
func (r *Replica) Peers() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.peers)
}
