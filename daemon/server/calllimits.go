package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
)

// Agents' unary calls in flight: at most agentCallsPerToken with one token
// (an agent makes at most three at once: a heartbeat, a status report and
// a resource-sync report; two replicas of it, while one hands over to the
// other, six), and at most agentCallsInAll with every token together.
const (
	agentCallsPerToken = 8
	agentCallsInAll    = 32
)

// agentCallLimits bounds the agents' unary calls in flight, so that no
// agent, whatever it sends, can take the database pool operator calls,
// token checks, retention and the workflow share (invariant I8: unary
// calls keep capacity of their own): a call beyond its token's limit is
// refused at once (ResourceExhausted), one beyond the limit in all waits
// for a place, for as long as its deadline allows. A status report of
// thousands of resources holds a connection for most of a second; 64 of
// them at once from one token held all 45, and operators' calls timed out.
type agentCallLimits struct {
	perToken int
	inAll    chan struct{}

	mu      sync.Mutex
	byToken map[string]int
}

func newAgentCallLimits(perToken, inAll int) *agentCallLimits {
	return &agentCallLimits{perToken: perToken, inAll: make(chan struct{}, inAll), byToken: map[string]int{}}
}

// Unary is the interceptor, after authentication (it reads the caller).
func (l *agentCallLimits) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Kind != auth.Agent {
		return handler(ctx, req)
	}
	release, err := l.take(ctx, p.Token())
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

func (l *agentCallLimits) take(ctx context.Context, token string) (release func(), err error) {
	l.mu.Lock()
	if l.byToken[token] >= l.perToken {
		l.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "too many calls at once with this token: at most %d", l.perToken)
	}
	l.byToken[token]++
	l.mu.Unlock()
	untake := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.byToken[token]--; l.byToken[token] == 0 {
			delete(l.byToken, token)
		}
	}
	select {
	case l.inAll <- struct{}{}:
		return func() { <-l.inAll; untake() }, nil
	case <-ctx.Done():
		untake()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
