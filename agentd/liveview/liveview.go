package liveview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/internal/textclean"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Serves is what a cluster's owner lets the agent show (agentd
// --live-views).
type Serves string

const (
	// Off: no live views; the loop does not run.
	Off Serves = "off"
	// Pods: the deployments' Pods and their objects' events.
	Pods Serves = "pods"
	// Logs: those and the containers' logs.
	Logs Serves = "logs"
)

// ParseServes reads --live-views.
func ParseServes(s string) (Serves, error) {
	switch v := Serves(s); v {
	case Off, Pods, Logs:
		return v, nil
	}
	return "", fmt.Errorf("live views: %q is none of off, pods, logs", s)
}

// The kinds of view a LiveRequest asks for.
const (
	KindPods   = "pods"
	KindEvents = "events"
	KindLogs   = "logs"
)

// Bounds' defaults (see Config).
const (
	DefaultMaxAnswers    = 8
	DefaultMaxFollows    = 4
	DefaultFirstByte     = 10 * time.Second
	DefaultAnswerTimeout = 30 * time.Second
	DefaultFollowTimeout = 30 * time.Minute
	DefaultStallTimeout  = 30 * time.Second
	DefaultMaxLogBytes   = 1 << 20
	// ChunkBytes bounds the log text of one LiveAnswerRequest.
	ChunkBytes = 64 << 10
	// MaxEvents is the most events an answer holds (the newest).
	MaxEvents = 200
	// MaxPods is the most Pods an answer holds (and whose events it reads).
	MaxPods = 100
	// MaxTerminationMessage bounds a container's termination message.
	MaxTerminationMessage = 2 << 10
	// maxTailLines bounds tail_lines.
	maxTailLines = 100_000
	// refusalTimeout bounds an answer that is only an error.
	refusalTimeout = 5 * time.Second
	// maxErrorText bounds an error answer's text.
	maxErrorText = 1 << 10
)

// Config bounds the agent's live views; zero values take the defaults.
type Config struct {
	Region, Identity string
	// Serves is what the agent shows (Pods or Logs; Off: do not Run).
	Serves Serves
	// MaxAnswers is how many requests are answered at once (8), of which
	// MaxFollows (4) follow a log; a request beyond either is answered at
	// once with ErrBusy.
	MaxAnswers, MaxFollows int
	// FirstByte is how long the API server may take to begin its answer
	// (10s): the Pods' and events' lists, a log's first bytes (a follow
	// may wait for its first line as long as it lasts).
	FirstByte time.Duration
	// AnswerTimeout bounds a whole answer that does not follow (30s),
	// FollowTimeout one that does (30m).
	AnswerTimeout, FollowTimeout time.Duration
	// StallTimeout ends an answer whose Send has been blocked this long
	// (30s): ctrld's side reads nothing of it.
	StallTimeout time.Duration
	// MaxLogBytes caps an answer's log text whatever ctrld asks (1 MiB).
	MaxLogBytes int64
	// BackoffMin and BackoffMax bound LiveRequests reconnects (1s, 60s).
	BackoffMin, BackoffMax time.Duration
}

func (c *Config) defaults() {
	if c.MaxAnswers <= 0 {
		c.MaxAnswers = DefaultMaxAnswers
	}
	if c.MaxFollows <= 0 {
		c.MaxFollows = DefaultMaxFollows
	}
	c.MaxFollows = min(c.MaxFollows, c.MaxAnswers)
	if c.FirstByte <= 0 {
		c.FirstByte = DefaultFirstByte
	}
	if c.AnswerTimeout <= 0 {
		c.AnswerTimeout = DefaultAnswerTimeout
	}
	if c.FollowTimeout <= 0 {
		c.FollowTimeout = DefaultFollowTimeout
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.MaxLogBytes <= 0 {
		c.MaxLogBytes = DefaultMaxLogBytes
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = time.Minute
	}
}

// Namespaces says which namespaces are the agent's (reconcile.Namespaces).
type Namespaces interface {
	Owns(ctx context.Context, ns string) (bool, error)
}

// Deps are what the live views read and answer through.
type Deps struct {
	// Cluster is ctrld's ClusterService on the agent's connection.
	Cluster ctrlv1.ClusterServiceClient
	Kube    kubernetes.Interface
	// Reserved and Namespaces are the agent's tenant boundary: a view is
	// served only in a namespace Reserved does not hold and Namespaces
	// says is the agent's.
	Reserved   naming.Reserved
	Namespaces Namespaces
	Log        *slog.Logger
	// Guard recovers a panic of one answer (which is then lost).
	Guard recovery.Guard
}

// Server answers live views. Run it only when Serves is not Off.
type Server struct {
	deps Deps
	cfg  Config

	mu      sync.Mutex
	answers int // in progress
	follows int // of them, follows

	// refusals bounds the goroutines sending busy answers.
	refusals chan struct{}
	wg       sync.WaitGroup

	// logBytesRead counts the log bytes read from the API server.
	logBytesRead atomic.Int64
}

// New returns a Server; Serves must be Pods or Logs.
func New(deps Deps, cfg Config) (*Server, error) {
	cfg.defaults()
	if cfg.Serves != Pods && cfg.Serves != Logs {
		return nil, fmt.Errorf("live views: serves %q: want %q or %q", cfg.Serves, Pods, Logs)
	}
	if deps.Cluster == nil || deps.Kube == nil || deps.Namespaces == nil {
		return nil, errors.New("live views: Cluster, Kube and Namespaces are required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Server{deps: deps, cfg: cfg, refusals: make(chan struct{}, cfg.MaxAnswers)}, nil
}

// Run keeps LiveRequests open until ctx ends, reopening it after a
// backoff, and answers each request. It returns once every answer it
// started has ended.
func (s *Server) Run(ctx context.Context) {
	defer s.wg.Wait()
	failures := 0
	for ctx.Err() == nil {
		began := time.Now()
		got, err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if got || time.Since(began) > 10*time.Second {
			failures = 0
		}
		failures++
		wait := s.backoff(failures)
		s.deps.Log.Warn("live views: the LiveRequests stream ended; reopening", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// backoff is jittered exponential, as the watch stream's.
func (s *Server) backoff(failures int) time.Duration {
	d := s.cfg.BackoffMin << min(failures-1, 16)
	d += time.Duration(rand.Int64N(int64(4*s.cfg.BackoffMin) + 1))
	return min(d, s.cfg.BackoffMax)
}

// stream reads one LiveRequests stream until it ends; got says whether it
// carried any request.
func (s *Server) stream(ctx context.Context) (got bool, err error) {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.deps.Cluster.LiveRequests(streamCtx, &ctrlv1.LiveRequestsRequest{
		Region: s.cfg.Region, AgentIdentity: s.cfg.Identity, Serves: string(s.cfg.Serves)})
	if err != nil {
		return false, err
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		s.dispatch(ctx, req)
	}
}

// dispatch starts the answer to req, or answers busy at once.
func (s *Server) dispatch(ctx context.Context, req *ctrlv1.LiveRequest) {
	follow := req.GetKind() == KindLogs && req.GetFollow()
	if err := s.take(follow); err != nil {
		s.refuse(ctx, req.GetId(), err)
		return
	}
	s.wg.Go(func() {
		defer s.release(follow)
		s.deps.Guard.Run("live view", func() error {
			s.answer(ctx, req)
			return nil
		})
	})
}

// take holds an answer's place, or says busy.
func (s *Server) take(follow bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers >= s.cfg.MaxAnswers {
		return fmt.Errorf("%w: %d answers in progress, at most %d at once on this agent; try again shortly", ErrBusy, s.answers, s.cfg.MaxAnswers)
	}
	if follow && s.follows >= s.cfg.MaxFollows {
		return fmt.Errorf("%w: %d logs followed, at most %d at once on this agent; stop one or try again later", ErrBusy, s.follows, s.cfg.MaxFollows)
	}
	s.answers++
	if follow {
		s.follows++
	}
	return nil
}

func (s *Server) release(follow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers--
	if follow {
		s.follows--
	}
}

// refuse answers id with err at once: on a goroutine of its own while
// fewer than MaxAnswers refusals are being sent, else before the next
// request is read (a flood of requests waits on its own refusals, never
// on answers).
func (s *Server) refuse(ctx context.Context, id string, err error) {
	select {
	case s.refusals <- struct{}{}:
		s.wg.Go(func() {
			defer func() { <-s.refusals }()
			s.sendError(ctx, id, err)
		})
	default:
		s.sendError(ctx, id, err)
	}
}

// sendError is an answer that is only an error.
func (s *Server) sendError(ctx context.Context, id string, err error) {
	ctx, cancel := context.WithTimeout(ctx, refusalTimeout)
	defer cancel()
	call, callErr := s.deps.Cluster.LiveAnswer(ctx)
	if callErr != nil {
		s.deps.Log.Debug("live views: answering failed", "id", id, "err", callErr)
		return
	}
	if err := call.Send(&ctrlv1.LiveAnswerRequest{Id: id, Error: errorText(err)}); err == nil {
		_, _ = call.CloseAndRecv()
	}
}

// errorText is err as people are shown it.
func errorText(err error) string {
	return textclean.Clean(err.Error(), maxErrorText)
}

// answer answers req on a LiveAnswer call of its own.
func (s *Server) answer(ctx context.Context, req *ctrlv1.LiveRequest) {
	follow := req.GetKind() == KindLogs && req.GetFollow()
	limit, tooLong := s.cfg.AnswerTimeout, ErrTooLong
	if follow {
		limit = s.cfg.FollowTimeout
	}
	// The call lives until the answer is sent (or stalls); the work in it
	// until its time is up, after which the call still carries why.
	callCtx, cancelCall := context.WithCancelCause(ctx)
	defer cancelCall(nil)
	call, err := s.deps.Cluster.LiveAnswer(callCtx)
	if err != nil {
		s.deps.Log.Debug("live views: answering failed", "id", req.GetId(), "err", err)
		return
	}
	work, cancelWork := context.WithTimeoutCause(callCtx, limit, fmt.Errorf("%w: more than %v", tooLong, limit))
	defer cancelWork()
	a := &answerCall{id: req.GetId(), call: call, stall: s.cfg.StallTimeout, cancel: cancelCall}
	err = s.serve(work, req, a)
	if work.Err() != nil {
		if cause := context.Cause(work); cause != nil {
			err = cause
		}
	}
	switch {
	case errors.Is(err, errGone):
		// ctrld ended the call (the person stopped reading) or it broke:
		// nobody to tell.
		return
	case errors.Is(err, ErrStalled):
		s.deps.Log.Info("live views: ended an answer ctrld read nothing of", "id", req.GetId(), "after", s.cfg.StallTimeout)
		return
	case err != nil:
		if a.send(&ctrlv1.LiveAnswerRequest{Error: errorText(err)}) != nil {
			return
		}
	}
	_, _ = call.CloseAndRecv()
}

// serve sends the answer to req; an error is the answer's error.
func (s *Server) serve(ctx context.Context, req *ctrlv1.LiveRequest, a *answerCall) error {
	switch req.GetKind() {
	case KindPods, KindEvents:
	case KindLogs:
		if s.cfg.Serves != Logs {
			return fmt.Errorf("%w: this agent's owner lets it show pods and events only, not logs (agentd --live-views=%s)", ErrNotServed, s.cfg.Serves)
		}
	default:
		return fmt.Errorf("%w: kind %q is none of pods, events, logs", ErrBadRequest, textclean.Clean(req.GetKind(), 64))
	}
	if err := s.admit(ctx, req); err != nil {
		return err
	}
	switch req.GetKind() {
	case KindPods:
		pods, err := s.pods(ctx, req)
		if err != nil {
			return err
		}
		return a.send(&ctrlv1.LiveAnswerRequest{Pods: pods, Done: true})
	case KindEvents:
		events, err := s.events(ctx, req)
		if err != nil {
			return err
		}
		return a.send(&ctrlv1.LiveAnswerRequest{Events: events, Done: true})
	default:
		return s.logs(ctx, req, a)
	}
}

// errGone means the answer's call ended on ctrld's side or broke.
var errGone = errors.New("the answer's call ended")

// answerCall is one answer's LiveAnswer call.
type answerCall struct {
	id     string
	call   ctrlv1.ClusterService_LiveAnswerClient
	stall  time.Duration
	cancel context.CancelCauseFunc
}

// send sends one chunk, carrying the request's id as every chunk does. A
// Send blocked for the stall timeout ends the answer (ErrStalled).
func (a *answerCall) send(m *ctrlv1.LiveAnswerRequest) error {
	m.Id = a.id
	t := time.AfterFunc(a.stall, func() { a.cancel(fmt.Errorf("%w (%v)", ErrStalled, a.stall)) })
	err := a.call.Send(m)
	t.Stop()
	if err != nil {
		return fmt.Errorf("%w: %w", errGone, err)
	}
	return nil
}
