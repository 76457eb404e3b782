package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/internal/recovery"
)

// errInternal is what a caller whose call panicked gets: the panic value
// and stack are for the log, not for clients.
var errInternal = status.Error(codes.Internal, "internal error: the call failed on the server and was logged; retry, or reconnect from the last bookmark")

// RecoverUnary is the outermost unary interceptor: a panic anywhere below
// it, authentication included, ends that call with Internal, never the
// process (invariant I6).
func RecoverUnary(g recovery.Guard) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := g.Run(info.FullMethod, func() (err error) {
			resp, err = handler(ctx, req)
			return err
		})
		if isPanic(err) {
			return nil, errInternal
		}
		return resp, err
	}
}

// RecoverStream is RecoverUnary for streams: the stream ends with
// Internal and its agent reconnects from its last bookmark. What the
// handler held (its subscription, its connection record) is released by
// the handler's own defers as the panic unwinds.
func RecoverStream(g recovery.Guard) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := g.Run(info.FullMethod, func() error { return handler(srv, ss) })
		if isPanic(err) {
			return errInternal
		}
		return err
	}
}

func isPanic(err error) bool {
	var p *recovery.Panic
	return errors.As(err, &p)
}
