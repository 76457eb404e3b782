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
// grpc-go's ServerStream.SendMsg blocks once the client's flow-control
// window is full and gRPC's buffer for the stream (64 KiB) with it, and
// returns only when the client takes data or the stream's context ends,
// which happens only after the handler has returned: a handler that sends
// by itself can never stop waiting. So the handler puts events in a small
// queue that a sending goroutine drains into SendMsg.
//
// The send timeout counts from when the client last took data, whatever is
// queued: a watchdog (a timer, no goroutine while it waits) runs while
// anything is pending (an event in SendMsg or queued; a keep-alive
// bookmark counts like any other) and ends the stream once SendMsg has not
// returned for the whole timeout. The clock starts when a send returns,
// or when an event is queued behind nothing (the client had taken
// everything before it). It does not wait for the queue to fill: a
// queue's worth of keep-alives alone took 16 keep-alive intervals (160 s
// by default) on top of the timeout, and a full sync of fewer events than
// the queue holds sat in it that long, holding its events. The stall
// cancels the handler's context with a *stallError as its cause, wherever
// the handler waits (for room in the queue, a page, the tailer); the
// handler returns, grpc-go ends the stream, which ends the blocked SendMsg
// and with it the goroutine.
//
// The sending goroutine runs only while events wait: it starts with the
// first event queued and ends once the queue is empty. An idle stream (most
// of them, most of the time) holds no goroutine and no stack for it: with
// 10,000 agents that is 10,000 goroutines and 40 MiB of stacks fewer.
type outbox struct {
	// ctx is the handler's; stall ends it, with the *stallError as its
	// cause.
	ctx     context.Context
	stall   context.CancelCauseFunc
	timeout time.Duration
	deliver Send
	guard   recovery.Guard
	queue   chan *ctrlv1.DeploymentChangeEvent
	failed  chan struct{} // closed when a send failed; err says why
	err     error

	mu      sync.Mutex
	running bool          // a sender runs: something is pending
	stopped chan struct{} // closed when the last sender started ends
	// lastTaken is when the client last took data: a send returned, or
	// a sender started with nothing pending before it.
	lastTaken time.Time
	// watchdog fires while a sender runs, at most the timeout after
	// lastTaken; armed says it is set to.
	watchdog *time.Timer
	armed    bool
	stalled  bool
}

// stallError ends a stream whose client took no data for the send timeout
// while events waited for it. It is an ErrFellBehind: the client should
// resume from its last bookmark.
type stallError struct {
	timeout time.Duration
	// pending counts the events waiting, the one being sent included.
	pending int
}

func (e *stallError) Error() string {
	return fmt.Sprintf("the client took no data for %v while %d events waited: %v", e.timeout, e.pending, ErrFellBehind)
}

func (e *stallError) Unwrap() error { return ErrFellBehind }

// newOutbox returns an outbox that sends through deliver. ctx is the
// handler's, and stall ends it: the outbox calls it with a *stallError
// when the client takes nothing for timeout while events wait. A panic
// while sending ends the sending (the handler sees it as an error), never
// the process (I6).
func newOutbox(ctx context.Context, stall context.CancelCauseFunc, deliver Send, timeout time.Duration, guard recovery.Guard) *outbox {
	return &outbox{
		ctx:     ctx,
		stall:   stall,
		timeout: timeout,
		deliver: deliver,
		guard:   guard,
		queue:   make(chan *ctrlv1.DeploymentChangeEvent, outboxSize),
		failed:  make(chan struct{}),
	}
}

// send queues ev for the client. It waits while the queue is full, until
// there is room, a send failed, or the handler's context ends (as a stall
// ends it).
func (o *outbox) send(ev *ctrlv1.DeploymentChangeEvent) error {
	select {
	case o.queue <- ev:
		o.startSender()
		return nil
	default:
	}
	// Full: a sender runs (every event queued made sure of one) and is
	// stuck in SendMsg, and its watchdog runs; or it failed.
	select {
	case o.queue <- ev:
		o.startSender()
		return nil
	case <-o.failed:
		return o.err
	case <-o.ctx.Done():
		return context.Cause(o.ctx)
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
	if o.running || o.err != nil || o.stalled {
		return
	}
	o.running = true
	// Nothing was pending: the client had taken everything, so the clock
	// starts now.
	o.lastTaken = time.Now()
	if !o.armed {
		o.armed = true
		if o.watchdog == nil {
			o.watchdog = time.AfterFunc(o.timeout, o.watch)
		} else {
			o.watchdog.Reset(o.timeout)
		}
	}
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
			o.watchdog.Stop()
			o.armed = false
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
			o.mu.Lock()
			o.lastTaken = time.Now()
			o.mu.Unlock()
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

// watch is the watchdog: while a sender runs, it ends the stream once the
// client has taken nothing for the timeout, and otherwise looks again when
// the timeout would next run out. With no sender it disarms until the next
// one starts.
func (o *outbox) watch() {
	o.mu.Lock()
	if !o.running || o.err != nil || o.stalled {
		o.armed = false
		o.mu.Unlock()
		return
	}
	if idle := time.Since(o.lastTaken); idle < o.timeout {
		o.watchdog.Reset(o.timeout - idle)
		o.mu.Unlock()
		return
	}
	o.armed = false
	o.stalled = true
	stall := &stallError{timeout: o.timeout, pending: len(o.queue) + 1} // + the one in SendMsg
	o.mu.Unlock()
	o.stall(stall)
}

// flush waits until the queued events are sent, for as long as the client
// keeps taking data (the watchdog ends the handler's context otherwise):
// the handler must not return before its last event (a resync_required,
// say) is handed to gRPC. A client that went away needs nothing more, and
// a stall is the handler's context's cause. Only the handler queues
// events, so nothing is queued meanwhile.
func (o *outbox) flush() error {
	o.mu.Lock()
	running, stopped := o.running, o.stopped
	o.mu.Unlock()
	if !running {
		return o.failure()
	}
	select {
	case <-stopped:
		return o.failure()
	case <-o.ctx.Done():
		return nil
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
