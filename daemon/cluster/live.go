package cluster

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// LiveRequests implements ctrlv1.ClusterServiceServer: the agent's end of
// live views, held open (daemon/liveview).
func (s *Service) LiveRequests(req *ctrlv1.LiveRequestsRequest, srv grpc.ServerStreamingServer[ctrlv1.LiveRequest]) error {
	ctx := srv.Context()
	if err := checkRegion(ctx, req.GetRegion()); err != nil {
		return err
	}
	if err := checkIdentity(req.GetAgentIdentity()); err != nil {
		return err
	}
	switch req.GetServes() {
	case "pods", "logs":
	default:
		return status.Errorf(codes.InvalidArgument, `serves: want "pods" or "logs", got %q`, req.GetServes())
	}
	if s.cfg.Live == nil {
		return status.Error(codes.Unimplemented, "this ctrld relays no live views")
	}
	return s.cfg.Live.ServeRequests(ctx, req.GetRegion(), req.GetAgentIdentity(), req.GetServes(), srv.Send)
}

// LiveAnswer implements ctrlv1.ClusterServiceServer: one answer, relayed
// to its asker chunk by chunk.
func (s *Service) LiveAnswer(srv grpc.ClientStreamingServer[ctrlv1.LiveAnswerRequest, ctrlv1.LiveAnswerResponse]) error {
	ctx := srv.Context()
	region, err := tokenRegion(ctx)
	if err != nil {
		return err
	}
	if s.cfg.Live == nil {
		return status.Error(codes.Unimplemented, "this ctrld relays no live views")
	}
	if err := s.cfg.Live.ServeAnswer(ctx, region, srv.Recv); err != nil {
		return err
	}
	return srv.SendAndClose(&ctrlv1.LiveAnswerResponse{})
}

// tokenRegion is the region of the caller's agent token.
func tokenRegion(ctx context.Context) (string, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Kind != auth.Agent {
		return "", status.Error(codes.PermissionDenied, "an agent token is required")
	}
	return p.Region, nil
}
