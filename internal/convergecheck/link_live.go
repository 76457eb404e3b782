package convergecheck

import (
	"context"

	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// LiveRequests implements ctrlv1.ClusterServiceClient.
func (l *link) LiveRequests(ctx context.Context, in *ctrlv1.LiveRequestsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.LiveRequest], error) {
	return l.current().LiveRequests(ctx, in, opts...)
}

// LiveAnswer implements ctrlv1.ClusterServiceClient.
func (l *link) LiveAnswer(ctx context.Context, opts ...grpc.CallOption) (grpc.ClientStreamingClient[ctrlv1.LiveAnswerRequest, ctrlv1.LiveAnswerResponse], error) {
	return l.current().LiveAnswer(ctx, opts...)
}
