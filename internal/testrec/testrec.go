package testrec

import (
	"fmt"
	"runtime"
	"testing"
)

// Result is how the helper ended the recorded test, if it did.
type Result struct {
	Failed, Skipped string
}

// recorder ends the helper's goroutine on Fatal and Skip, as the real
// ones do, and remembers the message.
type recorder struct {
	testing.TB
	res *Result
}

func (r recorder) Helper()           {}
func (r recorder) Fatal(args ...any) { r.res.Failed = fmt.Sprint(args...); runtime.Goexit() }
func (r recorder) Skip(args ...any)  { r.res.Skipped = fmt.Sprint(args...); runtime.Goexit() }

// Run calls helper with a recording TB built on t and reports how it ended.
func Run(t testing.TB, helper func(tb testing.TB)) Result {
	var res Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(recorder{TB: t, res: &res})
	}()
	<-done
	return res
}
