package peers

import (
	"context"
	"crypto/subtle"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Service returns the PeerService that obeys pokes carrying this replica's
// secret.
func (r *Replica) Service() ctrlv1.PeerServiceServer { return service{r: r} }

type service struct {
	ctrlv1.UnimplementedPeerServiceServer
	r *Replica
}

// Poke makes the tailer poll now (and read region control, if asked) when
// the request carries this replica's secret. Anything else is refused with
// Unauthenticated and does nothing: a guess costs the caller a round trip
// and this replica one comparison, never a database read. No bearer token
// is asked for (daemon/auth lets this one method through to this check).
func (s service) Poke(ctx context.Context, req *ctrlv1.PokeRequest) (*ctrlv1.PokeResponse, error) {
	r := s.r
	if subtle.ConstantTimeCompare([]byte(req.GetSecret()), []byte(r.self.Secret)) != 1 {
		r.metrics.received.WithLabelValues("refused").Inc()
		return nil, status.Error(codes.Unauthenticated, "not this ctrld replica's secret")
	}
	r.metrics.received.WithLabelValues("accepted").Inc()
	r.local.Poke()
	if req.GetControlChanged() {
		if err := r.local.RefreshControl(ctx); err != nil {
			// The tailer reads region control every second anyway.
			r.log.Debug("peers: reading region control after a poke failed", "err", err)
		}
	}
	return &ctrlv1.PokeResponse{}, nil
}
