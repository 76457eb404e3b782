package liveview

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Bounds of one replica's live views.
const (
	// FirstByte bounds the wait for an agent's answer to begin.
	FirstByte = 10 * time.Second
	// queuedPerAgent bounds the requests sent to one agent that its
	// answer has not begun for yet (the agent bounds those it answers at
	// once itself): more are refused at once, so that an agent that
	// does not keep up costs people an error, not a 10 s wait each.
	queuedPerAgent = 16
)

// Remote asks for a live view of a region whose agent is connected to
// another replica. It returns ErrNoAgent when none has it.
type Remote interface {
	AskRemote(ctx context.Context, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error
}

// ErrNoAgent: no agent of the region has a LiveRequests stream open here
// (or, from Remote, on any replica).
var ErrNoAgent = errors.New("no agent of the region serves live views on this replica")

// Hub is one replica's live-view traffic.
type Hub struct {
	// Remote asks other replicas; nil: this replica only.
	Remote Remote

	mu      sync.Mutex
	agents  map[string]*agentConn // by region: the newest stream
	pending map[string]*pending   // by request ID
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{agents: map[string]*agentConn{}, pending: map[string]*pending{}}
}

// agentConn is one agent's open LiveRequests stream.
type agentConn struct {
	region, identity, serves string
	requests                 chan *ctrlv1.LiveRequest
	// waiting counts requests sent whose answer has not begun (guarded
	// by Hub.mu).
	waiting int
}

// pending is a request waiting for, or reading, its answer.
type pending struct {
	region string
	agent  *agentConn
	// chunks carries the answer's chunks to the asker, one at a time:
	// the agent's call reads the next only when the asker took this one.
	chunks chan *ctrlv1.LiveAnswerRequest
	// gone closes when the asker stopped reading.
	gone chan struct{}
	// attached: an answer call took the request (only one may).
	attached bool
}

// ServeRequests is the LiveRequests call of an agent of region: it sends
// the requests asked of the region down the stream until the agent goes.
// A newer stream of the region takes its place.
func (h *Hub) ServeRequests(ctx context.Context, region, identity, serves string, send func(*ctrlv1.LiveRequest) error) error {
	a := &agentConn{region: region, identity: identity, serves: serves, requests: make(chan *ctrlv1.LiveRequest, queuedPerAgent)}
	h.mu.Lock()
	h.agents[region] = a
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if h.agents[region] == a {
			delete(h.agents, region)
		}
		h.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req := <-a.requests:
			if err := send(req); err != nil {
				return err
			}
		}
	}
}

// ServeAnswer is a LiveAnswer call of an agent of region: recv gives its
// chunks. The first names a request this replica sent the region; every
// chunk goes to its asker, one at a time, until the answer is done, the
// agent ends the call, or the asker stopped reading (the call then ends
// with Canceled, so the agent stops).
func (h *Hub) ServeAnswer(ctx context.Context, region string, recv func() (*ctrlv1.LiveAnswerRequest, error)) error {
	first, err := recv()
	if err != nil {
		return err
	}
	h.mu.Lock()
	p := h.pending[first.GetId()]
	ok := p != nil && p.region == region && !p.attached
	if ok {
		p.attached = true
		p.agent.waiting--
	}
	h.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "no live request %q of region %s waits on this replica", first.GetId(), region)
	}
	chunk := first
	for {
		select {
		case p.chunks <- chunk:
		case <-p.gone:
			return status.Error(codes.Canceled, "the person stopped reading")
		case <-ctx.Done():
			return ctx.Err()
		}
		if chunk.GetDone() || chunk.GetError() != "" {
			return nil
		}
		if chunk, err = recv(); err != nil {
			// The agent's call ended without done: tell the asker.
			select {
			case p.chunks <- &ctrlv1.LiveAnswerRequest{Error: "the agent's answer broke off: " + status.Convert(err).Message()}:
			case <-p.gone:
			}
			return err
		}
	}
}

// Ask asks region's agent for req and gives each chunk of its answer to
// each, in order, until the answer is done (nil), ends with the agent's
// error (FailedPrecondition naming it), or ctx ends. each may block: the
// agent waits. The agent is asked here if it is connected to this
// replica, else through Remote.
func (h *Hub) Ask(ctx context.Context, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error {
	err := h.AskLocal(ctx, region, req, each)
	if errors.Is(err, ErrNoAgent) && h.Remote != nil {
		err = h.Remote.AskRemote(ctx, region, req, each)
	}
	if errors.Is(err, ErrNoAgent) {
		return status.Errorf(codes.Unavailable, "region %s: its agent is not connected for live views (not running, older than live views, or started with --live-views=off)", region)
	}
	return err
}

// AskLocal is Ask of an agent connected to this replica only: ErrNoAgent
// when none of region is.
func (h *Hub) AskLocal(ctx context.Context, region string, req *ctrlv1.LiveRequest, each func(*ctrlv1.LiveAnswerRequest) error) error {
	h.mu.Lock()
	a := h.agents[region]
	h.mu.Unlock()
	if a == nil {
		return ErrNoAgent
	}
	if req.GetKind() == "logs" && a.serves != "logs" {
		return status.Errorf(codes.FailedPrecondition, "region %s: its agent serves no logs (its owner started it with --live-views=%s)", region, a.serves)
	}
	req.Id = newID()
	p := &pending{region: region, agent: a, chunks: make(chan *ctrlv1.LiveAnswerRequest), gone: make(chan struct{})}
	h.mu.Lock()
	if a.waiting >= queuedPerAgent {
		h.mu.Unlock()
		return status.Errorf(codes.ResourceExhausted, "region %s: its agent has %d live views waiting for it already; try again", region, queuedPerAgent)
	}
	a.waiting++
	h.pending[req.Id] = p
	h.mu.Unlock()
	defer func() {
		close(p.gone)
		h.mu.Lock()
		if !p.attached {
			a.waiting--
		}
		delete(h.pending, req.Id)
		h.mu.Unlock()
	}()
	select {
	case a.requests <- req:
	default:
		return status.Errorf(codes.ResourceExhausted, "region %s: its agent has %d live views waiting for it already; try again", region, queuedPerAgent)
	}
	first := time.NewTimer(FirstByte)
	defer first.Stop()
	for started := false; ; started = true {
		var chunk *ctrlv1.LiveAnswerRequest
		if started {
			select {
			case chunk = <-p.chunks:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			select {
			case chunk = <-p.chunks:
			case <-first.C:
				return status.Errorf(codes.DeadlineExceeded, "region %s: its agent did not answer within %s", region, FirstByte)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if msg := chunk.GetError(); msg != "" {
			return status.Errorf(codes.FailedPrecondition, "region %s's agent: %s", region, msg)
		}
		if err := each(chunk); err != nil {
			return err
		}
		if chunk.GetDone() {
			return nil
		}
	}
}

func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("liveview: no randomness: %v", err))
	}
	return hex.EncodeToString(b)
}
