package convergecheck

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The schedule returns only once the slow restarts it began are over,
// whether it ends normally, with a failed step, or with a step ending the
// test (t.Fatal): a restart that outlived its round would log after its
// test, or meet a stopped database or cluster.
func TestScheduleWaitsForSlowRestarts(t *testing.T) {
	ends := map[string]func(context.Context) (bool, error){
		"normally":                    func(context.Context) (bool, error) { return true, nil },
		"with a failed step":          func(context.Context) (bool, error) { return false, errors.New("broken") },
		"with a step ending the test": func(context.Context) (bool, error) { runtime.Goexit(); return false, nil },
	}
	for how, end := range ends {
		s := &System{logf: t.Logf, slowCtx: context.Background()}
		var busy, restarted atomic.Bool
		steps := []step{
			{fault: FaultAPIServer, what: "restart, slowly", do: func(context.Context) (bool, error) {
				return s.background(&busy, "slow restart", func(context.Context) error {
					time.Sleep(300 * time.Millisecond)
					restarted.Store(true)
					return nil
				}), nil
			}},
			{fault: FaultStreamCut, what: "end the schedule " + how, do: end},
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runSchedule(context.Background(), time.Now(), steps, map[string]int{})
		}()
		<-done
		if !restarted.Load() {
			t.Errorf("ended %s: the schedule returned with a restart still under way", how)
		}
	}
}
