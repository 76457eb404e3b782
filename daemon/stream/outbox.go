package stream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// outboxSize is how many events a stream queues for its client: enough
// that a reading client never waits on the handler, small enough that a
// client that does not read holds almost nothing.
const outboxSize = 16

// outbox sends a stream's events from a goroutine of its own, so that the
// handler can give up on a client that does not read (invariant I8).
//
// grpc-go's ServerStream.SendMsg blocks while the client's flow-control
// window is full, and returns only when the client reads or the stream's
// context ends, which happens only after the handler has returned: a
// handler that sends by itself can never stop waiting. So the handler puts
// events in a small queue that a sending goroutine drains into SendMsg, and
// waits at most the send timeout for room in it. The queue stays full only
// while that goroutine is stuck in SendMsg, so a wait that times out means
// the client accepted nothing for the whole timeout. The handler then
// returns a *stallError; grpc-go ends the stream, which ends the blocked
// SendMsg and with it the goroutine.
//
// The sending goroutine runs only while events wait: it starts with the
// first event queued and ends once the queue is empty. An idle stream (most
// of them, most of the time) holds no goroutine and no stack for it: with
// 10,000 agents that is 10,000 goroutines and 40 MiB of stacks fewer.
type outbox struct {
	ctx     context.Context
	timeout time.Duration
	deliver Send
	guard   recovery.Guard
	queue   chan *ctrlv1.DeploymentChangeEvent
	sent    chan struct{} // a send completed (capacity 1: a flag)
	failed  chan struct{} // closed when a send failed; err says why
	err     error

	mu      sync.Mutex
	running bool          // a sender runs
	stopped chan struct{} // closed when the last sender started ends
}

// stallError ends a stream whose client read nothing for the send timeout
// while events waited for it. It is an ErrFellBehind: the client should
// resume from its last bookmark.
type stallError struct {
	timeout time.Duration
	// pending counts the events waiting, the one being sent included.
	pending int
}

func (e *stallError) Error() string {
	return fmt.Sprintf("the client read nothing for %v while %d events waited: %v", e.timeout, e.pending, ErrFellBehind)
}

func (e *stallError) Unwrap() error { return ErrFellBehind }

// newOutbox returns an outbox that sends through deliver. A panic while
// sending ends the sending (the handler sees it as an error), never the
// process (I6).
func newOutbox(ctx context.Context, deliver Send, timeout time.Duration, guard recovery.Guard) *outbox {
	return &outbox{
		ctx:     ctx,
		timeout: timeout,
		deliver: deliver,
		guard:   guard,
		queue:   make(chan *ctrlv1.DeploymentChangeEvent, outboxSize),
		sent:    make(chan struct{}, 1),
		failed:  make(chan struct{}),
	}
}

// send queues ev for the client. It waits while the queue is full, for at
// most the send timeout.
func (o *outbox) send(ev *ctrlv1.DeploymentChangeEvent) error {
	select {
	case o.queue <- ev:
		o.startSender()
		return nil
	default:
	}
	// Full: a sender runs (every event queued made sure of one) and is
	// stuck in SendMsg, or it failed.
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	select {
	case o.queue <- ev:
		o.startSender()
		return nil
	case <-o.failed:
		return o.err
	case <-o.ctx.Done():
		return o.ctx.Err()
	case <-timer.C:
		// The event that did not fit waits too.
		return &stallError{timeout: o.timeout, pending: len(o.queue) + 2}
	}
}

// startSender starts a sending goroutine unless one runs, or a send
// failed. No event is stranded: a sender ends only once it has seen the
// queue empty under mu, and this runs under mu after the event was queued,
// so it finds either a sender that has yet to look (and will see the event)
// or none, and starts one.
func (o *outbox) startSender() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running || o.err != nil {
		return
	}
	o.running = true
	stopped := make(chan struct{})
	o.stopped = stopped
	go func() {
		defer close(stopped)
		if err := o.guard.Run("stream-send", o.drain); err != nil {
			// failed closes before running clears: flush, seeing no
			// sender, must see the failure too.
			o.mu.Lock()
			o.err = err
			close(o.failed)
			o.running = false
			o.mu.Unlock()
		}
	}()
}

// drain sends what is queued, and returns once the queue is empty (marking
// the sender gone) or with the first error.
func (o *outbox) drain() error {
	for {
		select {
		case ev := <-o.queue:
			if err := o.deliver(ev); err != nil {
				return err
			}
			select {
			case o.sent <- struct{}{}:
			default:
			}
		default:
			o.mu.Lock()
			if len(o.queue) == 0 {
				o.running = false
				o.mu.Unlock()
				return nil
			}
			o.mu.Unlock()
		}
	}
}

// flush waits until the queued events are sent, for as long as the client
// keeps accepting one within the send timeout: the handler must not return
// before its last event (a resync_required, say) is handed to gRPC. A
// client that went away needs nothing more. Only the handler queues
// events, so nothing is queued meanwhile.
func (o *outbox) flush() error {
	o.mu.Lock()
	running, stopped := o.running, o.stopped
	o.mu.Unlock()
	if !running {
		return o.failure()
	}
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	for {
		select {
		case <-stopped:
			return o.failure()
		case <-o.ctx.Done():
			return nil
		case <-o.sent:
			timer.Reset(o.timeout)
		case <-timer.C:
			return &stallError{timeout: o.timeout, pending: len(o.queue) + 1}
		}
	}
}

// failure is the error a send failed with, if one did.
func (o *outbox) failure() error {
	select {
	case <-o.failed:
		return o.err
	default:
		return nil
	}
}
