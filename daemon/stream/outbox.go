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
// events in a small queue that one goroutine drains into SendMsg, and waits
// at most the send timeout for room in it. The queue stays full only while
// that goroutine is stuck in SendMsg, so a wait that times out means the
// client accepted nothing for the whole timeout. The handler then returns a
// *stallError; grpc-go ends the stream, which ends the blocked SendMsg and
// with it the goroutine.
type outbox struct {
	ctx     context.Context
	timeout time.Duration
	queue   chan *ctrlv1.DeploymentChangeEvent
	closing sync.Once
	sent    chan struct{} // a send completed (capacity 1: a flag)
	done    chan struct{} // the goroutine ended; err says why
	err     error
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

// startOutbox starts sending through send. A panic while sending ends the
// sending (the handler sees it as an error), never the process (I6).
func startOutbox(ctx context.Context, send Send, timeout time.Duration, guard recovery.Guard) *outbox {
	o := &outbox{
		ctx:     ctx,
		timeout: timeout,
		queue:   make(chan *ctrlv1.DeploymentChangeEvent, outboxSize),
		sent:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go func() {
		defer close(o.done)
		o.err = guard.Run("stream-send", func() error {
			for ev := range o.queue {
				if err := send(ev); err != nil {
					return err
				}
				select {
				case o.sent <- struct{}{}:
				default:
				}
			}
			return nil
		})
	}()
	return o
}

// send queues ev for the client. It waits while the queue is full, for at
// most the send timeout.
func (o *outbox) send(ev *ctrlv1.DeploymentChangeEvent) error {
	select {
	case o.queue <- ev:
		return nil
	default:
	}
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	select {
	case o.queue <- ev:
		return nil
	case <-o.done:
		return o.err
	case <-o.ctx.Done():
		return o.ctx.Err()
	case <-timer.C:
		// The event that did not fit waits too.
		return &stallError{timeout: o.timeout, pending: len(o.queue) + 2}
	}
}

// flush queues nothing more and waits until the queued events are sent,
// for as long as the client keeps accepting one within the send timeout:
// the handler must not return before its last event (a resync_required,
// say) is handed to gRPC. A client that went away needs nothing more.
func (o *outbox) flush() error {
	o.close()
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	for {
		select {
		case <-o.done:
			return o.err
		case <-o.ctx.Done():
			return nil
		case <-o.sent:
			timer.Reset(o.timeout)
		case <-timer.C:
			return &stallError{timeout: o.timeout, pending: len(o.queue) + 1}
		}
	}
}

// close ends the queue, so that the goroutine ends once it has sent what
// is queued or a send fails (as every send does once the handler has
// returned). It is safe to call more than once.
func (o *outbox) close() { o.closing.Do(func() { close(o.queue) }) }
