package eventually_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/eventually"
)

func TestTrueWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	eventually.True(t, time.Second, "the third try", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("tried %d times, want 3", n.Load())
	}
}

func TestTrueFailsSayingWhatNeverHappened(t *testing.T) {
	ft := &fatal{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		eventually.True(ft, 50*time.Millisecond, "the sky fell", func() bool { return false })
	}()
	<-done
	if ft.msg != "after 50ms: the sky fell" {
		t.Fatalf("failed with %q", ft.msg)
	}
}

// fatal records Fatalf and ends the goroutine, as testing does.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
