package stream

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
)

// admission counts the streams being served, per token and in total, and
// refuses the ones beyond the limits before they cost anything (invariant
// I8): one token cannot open a thousand streams, and no crowd of tokens can
// make this process serve more than it can hold.
type admission struct {
	maxPerToken, maxTotal int
	refused               *prometheus.CounterVec

	mu    sync.Mutex
	total int
	// perToken counts by the caller's Principal, which carries its token's
	// hash: two tokens are two keys even when they share a name.
	perToken map[auth.Principal]int
}

func newAdmission(maxPerToken, maxTotal int, refused *prometheus.CounterVec) *admission {
	return &admission{maxPerToken: maxPerToken, maxTotal: maxTotal, refused: refused, perToken: map[auth.Principal]int{}}
}

// admit counts a stream of ctx's caller and returns its release, or
// ResourceExhausted naming the limit it would exceed.
func (a *admission) admit(ctx context.Context) (release func(), err error) {
	p, _ := auth.FromContext(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perToken[p] >= a.maxPerToken {
		a.refused.WithLabelValues("per_token").Inc()
		return nil, status.Errorf(codes.ResourceExhausted,
			"this token already has %d open streams, the limit per token (an agent needs one, two while it rolls over); end one before opening another", a.maxPerToken)
	}
	if a.total >= a.maxTotal {
		a.refused.WithLabelValues("total").Inc()
		return nil, status.Errorf(codes.ResourceExhausted,
			"this ctrld already serves %d streams, its limit; retry later or through another replica", a.maxTotal)
	}
	a.perToken[p]++
	a.total++
	return sync.OnceFunc(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.total--
		if a.perToken[p]--; a.perToken[p] == 0 {
			delete(a.perToken, p)
		}
	}), nil
}
