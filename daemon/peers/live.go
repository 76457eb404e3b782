package peers

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/liveview"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// LocalViews answers live views of the agents connected to this replica
// (liveview.Hub's AskLocal).
type LocalViews interface {
	AskLocal(ctx context.Context, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error
}

// ServeLiveViews makes this replica answer its peers' LiveView calls from
// local.
func (r *Replica) ServeLiveViews(local LocalViews) { r.views.Store(&local) }

// AskRemote asks each peer in turn for a live view of region until one
// has the region's agent: liveview.ErrNoAgent when none has. It
// implements liveview.Remote.
func (r *Replica) AskRemote(ctx context.Context, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error {
	r.mu.RLock()
	peers := make([]*peer, 0, len(r.peers))
	for _, p := range r.peers {
		peers = append(peers, p)
	}
	r.mu.RUnlock()
	for _, p := range peers {
		err := askPeer(ctx, p, region, req, each)
		if status.Code(err) == codes.NotFound {
			continue
		}
		return err
	}
	return liveview.ErrNoAgent
}

// askPeer asks one peer; NotFound when its replica has no agent of the
// region.
func askPeer(ctx context.Context, p *peer, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the person stopped reading: the peer's agent stops too
	s, err := p.client.LiveView(ctx, &ctrlv1.LiveViewRequest{Secret: p.row.Secret, Region: region, Request: req})
	if err != nil {
		return err
	}
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(m.GetChunk()); err != nil {
			return err
		}
	}
}

// LiveView answers a peer's live view from this replica's agents. Like
// Poke, it asks for this replica's secret and nothing else.
func (s service) LiveView(req *ctrlv1.LiveViewRequest, srv grpc.ServerStreamingServer[ctrlv1.LiveViewResponse]) error {
	r := s.r
	if subtle.ConstantTimeCompare([]byte(req.GetSecret()), []byte(r.self.Secret)) != 1 {
		return status.Error(codes.Unauthenticated, "not this ctrld replica's secret")
	}
	local := r.views.Load()
	if local == nil {
		return status.Error(codes.NotFound, "this replica relays no live views")
	}
	err := (*local).AskLocal(srv.Context(), req.GetRegion(), req.GetRequest(), func(c *ctrlv1.LiveAnswerRequest) error {
		return srv.Send(&ctrlv1.LiveViewResponse{Chunk: c})
	})
	if errors.Is(err, liveview.ErrNoAgent) {
		return status.Errorf(codes.NotFound, "no agent of region %s is connected here", req.GetRegion())
	}
	return err
}
