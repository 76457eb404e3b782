package server

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/deploysync/deploysync/daemon/stream"
)

// connListener is the gRPC listener, keeping the connections it accepted
// so that a replica that cannot serve streams can close them (closeAll).
//
// Why close them: while its database cannot be read a replica ends its
// streams and refuses new ones, but an agent retries on the connection it
// has, and behind a layer-4 load balancer (a Kubernetes Service) that
// connection stays with this replica however often it is refused. Closed,
// the agent dials again, and the balancer, which has taken this replica
// out (its /readyz fails), sends it to one that can serve it.
type connListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// byRemote are the same connections by their remote address.
	byRemote map[string]*trackedConn
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[*trackedConn]struct{}{}, byRemote: map[string]*trackedConn{}}
}

// Accept accepts a connection and keeps it until it is closed.
func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, from: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.byRemote[c.RemoteAddr().String()] = tc
	l.mu.Unlock()
	return tc, nil
}

// closeAll closes every connection open now and returns how many.
func (l *connListener) closeAll() int {
	l.mu.Lock()
	open := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	return len(open)
}

// trackedConn leaves its listener's set when closed, by either side.
type trackedConn struct {
	net.Conn
	from *connListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.from.mu.Lock()
		delete(c.from.conns, c)
		if remote := c.RemoteAddr().String(); c.from.byRemote[remote] == c {
			delete(c.from.byRemote, remote)
		}
		c.from.mu.Unlock()
	})
	return c.Conn.Close()
}

// connCloser is a stats handler that gives each connection's context (the
// parent of its calls' contexts) the means to close the connection
// (stream.WithCloseConnection): a stream whose client stopped reading
// closes it, the one way to free what gRPC queued for that client.
type connCloser struct{ l *connListener }

func (h connCloser) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	h.l.mu.Lock()
	c := h.l.byRemote[info.RemoteAddr.String()]
	h.l.mu.Unlock()
	if c == nil {
		return ctx
	}
	return stream.WithCloseConnection(ctx, func() { c.Close() })
}

func (connCloser) HandleConn(context.Context, stats.ConnStats)                     {}
func (connCloser) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connCloser) HandleRPC(context.Context, stats.RPCStats)                       {}
