package stream

import (
	"fmt"
	"runtime/debug"
)

// aside runs fn on a goroutine of its own and waits for it. A panic in fn
// panics the caller, with fn's stack in its message, so it ends the stream
// as a panic of the handler's own would (invariant I6).
//
// A stream's handler runs as long as its stream and spends that time
// waiting, about 4 KiB deep (gRPC's frames, then ours). A goroutine's stack
// grows to fit its deepest call and shrinks at a collection only while it
// uses less than a quarter of it, so one database call made on the handler
// (the driver runs deep) would keep a 16 KiB stack for the stream's life
// where 8 KiB holds the wait. Work that reaches the database runs aside
// instead: its goroutine lasts only as long as the work, and its stack goes
// back to the runtime with it. The cost is a goroutine start (about a
// microsecond) per database round, against 8 KiB for each idle stream:
// BenchmarkIdleStreams at 1,000 streams measured the handler's stack 16 KiB
// on the handler, 8 KiB aside.
func aside(fn func() error) error {
	var (
		err      error
		panicked *asidePanic
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				panicked = &asidePanic{value: v, stack: debug.Stack()}
			}
		}()
		err = fn()
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// asidePanic carries a panic of work run aside to the goroutine that waited
// for it, with the stack where it happened.
type asidePanic struct {
	value any
	stack []byte
}

func (p *asidePanic) Error() string {
	return fmt.Sprintf("%v\n\nwhere it happened (run aside from the stream's handler):\n%s", p.value, p.stack)
}

// Unwrap gives the panic's value when it is an error.
func (p *asidePanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}
