package peers

import (
	"context"
	"log/slog"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/dial"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Poke is the operator service's notifier: after a write committed
// through this replica it pokes the local tailer, then every live peer, and
// returns at once.
func (r *Replica) Poke() {
	r.local.Poke()
	r.pokeAll(false)
}

// RefreshControl reads the regions' pause and resync state into the local
// tailer now, after an operator changed it through this replica, and asks
// every peer to do the same.
func (r *Replica) RefreshControl(ctx context.Context) error {
	err := r.local.RefreshControl(ctx)
	r.pokeAll(true)
	return err
}

// pokeAll wakes every peer's sender without waiting for any.
func (r *Replica) pokeAll(control bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, p := range r.peers {
		p.wake(control)
	}
}

// follow makes the set of peers poked the given rows: new ones get a sender,
// gone ones have theirs stopped. nil stops every sender.
func (r *Replica) follow(rows []*ent.CtrldReplica) {
	next := make(map[string]*ent.CtrldReplica, len(rows))
	for _, row := range rows {
		next[row.ID] = row
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, p := range r.peers {
		if _, ok := next[id]; !ok {
			p.stop()
			delete(r.peers, id)
			r.log.Info("peers: no longer poking a replica", "peer", id, "instance", p.row.Instance, "address", p.row.Address)
		}
	}
	for id, row := range next {
		if _, ok := r.peers[id]; ok {
			continue
		}
		if err := CheckAddress(row.Address); err != nil {
			// Only host:port gets dialled: no scheme or path that would
			// make gRPC dial a socket file or another resolver, and no
			// address that is not one host's (this one's, a link-local
			// metadata server's).
			r.log.Warn("peers: a replica's registered address is not one it may be poked at; not poking it", "peer", id, "address", row.Address, "err", err)
			continue
		}
		p, err := r.newPeer(row)
		if err != nil {
			r.log.Warn("peers: cannot dial a replica; its agents get changes made here at its next poll", "peer", id, "address", row.Address, "err", err)
			continue
		}
		r.peers[id] = p
		r.log.Info("peers: poking a replica after writes", "peer", id, "instance", row.Instance, "address", row.Address)
	}
	r.metrics.live.Set(float64(len(r.peers)))
}

// peer sends pokes to one replica. Pokes coalesce: one is in flight at a
// time, and any number of wakes meanwhile make one more after it. A peer
// that does not answer holds only its own sender, for PokeTimeout per poke.
type peer struct {
	row     *ent.CtrldReplica
	conn    *grpc.ClientConn
	client  ctrlv1.PeerServiceClient
	pending chan struct{} // capacity 1: the poke waiting for the one in flight
	control atomic.Bool   // the pending poke asks for region control too
	cancel  context.CancelFunc
	done    chan struct{}
}

func (r *Replica) newPeer(row *ent.CtrldReplica) (*peer, error) {
	// passthrough: the address is dialled as it is (a DNS name is looked
	// up by the dialer at each connection), never read as a resolver's
	// target.
	conn, err := grpc.NewClient("passthrough:///"+row.Address,
		grpc.WithTransportCredentials(r.cfg.Credentials),
		grpc.WithConnectParams(dial.Reconnect()),
		// What a name resolves to is checked as the address itself was.
		grpc.WithContextDialer(dialPeer),
		// Replicas dial each other directly, never through the HTTP
		// proxy the environment may name for the outside world.
		grpc.WithNoProxy())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{row: row, conn: conn, client: ctrlv1.NewPeerServiceClient(conn),
		pending: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	log := r.log.With("peer", row.ID, "instance", row.Instance, "address", row.Address)
	go func() {
		defer close(p.done)
		defer conn.Close()
		r.guard.Loop(ctx, "peer-poke", func(ctx context.Context) { r.send(ctx, p, log) })
	}()
	return p, nil
}

// wake asks for a poke; it never blocks.
func (p *peer) wake(control bool) {
	if control {
		p.control.Store(true)
	}
	select {
	case p.pending <- struct{}{}:
	default: // one is pending already; it will carry this one's news
	}
}

// stop ends the sender and waits for it; a poke in flight is cancelled.
func (p *peer) stop() {
	p.cancel()
	<-p.done
}

// send pokes p each time it is woken, until ctx ends. Failures are logged
// when they start and when they end, not once per poke: a dead peer is
// dialled at every write until its row goes stale.
func (r *Replica) send(ctx context.Context, p *peer, log *slog.Logger) {
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.pending:
		}
		pokeCtx, cancel := context.WithTimeout(ctx, r.cfg.PokeTimeout)
		_, err := p.client.Poke(pokeCtx, &ctrlv1.PokeRequest{Secret: p.row.Secret, ControlChanged: p.control.Swap(false)})
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			r.metrics.sent.WithLabelValues("error").Inc()
			if !failing {
				log.Warn("peers: poking a replica failed; its agents get changes made here at its next poll", "err", err)
			}
			failing = true
		default:
			r.metrics.sent.WithLabelValues("ok").Inc()
			if failing {
				log.Info("peers: poking a replica works again")
			}
			failing = false
		}
	}
}
