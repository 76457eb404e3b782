package stream

import "context"

type closeConnectionKey struct{}

// WithCloseConnection returns ctx carrying close, which closes the network
// connection the streams served under ctx arrive on (the server sets it on
// each connection's context).
func WithCloseConnection(ctx context.Context, close func()) context.Context {
	return context.WithValue(ctx, closeConnectionKey{}, close)
}

// closeConnection closes ctx's connection, if ctx says how.
func closeConnection(ctx context.Context) {
	if close, ok := ctx.Value(closeConnectionKey{}).(func()); ok {
		close()
	}
}
