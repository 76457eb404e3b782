package server

import (
	"net"
	"sync"
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
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[*trackedConn]struct{}{}}
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
		c.from.mu.Unlock()
	})
	return c.Conn.Close()
}
