package recovery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func guard() (Guard, *bytes.Buffer) {
	var buf bytes.Buffer
	return Guard{
		Log:    slog.New(slog.NewTextHandler(&buf, nil)),
		Panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"}),
	}, &buf
}

// A panic becomes a *Panic error with its stack, logged at error level and
// counted under where; an ordinary error passes through untouched.
func TestRunTurnsAPanicIntoAnErrorLoggedAndCounted(t *testing.T) {
	g, log := guard()
	err := g.Run("job", func() error { var m map[string]int; m["x"] = 1; return nil })
	var p *Panic
	if !errors.As(err, &p) {
		t.Fatalf("got %v, want a *Panic", err)
	}
	if p.Where != "job" || !strings.Contains(p.Error(), "nil map") || !strings.Contains(string(p.Stack), "recovery_test.go") {
		t.Errorf("panic = %q where %q, stack:\n%s", p.Error(), p.Where, p.Stack)
	}
	if got := testutil.ToFloat64(g.Panics.WithLabelValues("job")); got != 1 {
		t.Errorf("counted %v panics, want 1", got)
	}
	if out := log.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "recovery_test.go") {
		t.Errorf("log lacks the error or the stack:\n%s", out)
	}

	want := errors.New("plain")
	if err := g.Run("job", func() error { return want }); err != want {
		t.Errorf("got %v, want the function's own error", err)
	}
	if err := (Guard{}).Run("bare", func() error { panic("no log, no counter") }); !errors.As(err, &p) {
		t.Errorf("a zero Guard returned %v", err)
	}
}

// A loop that panics is started again after DefaultRestartPause, not
// before; it stops for good once ctx ends. In a synctest bubble the pause
// is the real default and costs no time.
func TestLoopRestartsAfterAPanicUntilTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := guard()
		ctx, cancel := context.WithCancel(context.Background())
		var rounds atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.Loop(ctx, "loop", func(ctx context.Context) {
				if rounds.Add(1) == 1 {
					panic("first round")
				}
				<-ctx.Done()
			})
		}()
		time.Sleep(DefaultRestartPause - time.Millisecond)
		synctest.Wait()
		if n := rounds.Load(); n != 1 {
			t.Fatalf("%d rounds a moment before the pause after the panic was over, want 1", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := rounds.Load(); n != 2 {
			t.Fatalf("%d rounds once the pause after the panic was over, want 2", n)
		}
		cancel()
		<-done
		if got := testutil.ToFloat64(g.Panics.WithLabelValues("loop")); got != 1 {
			t.Errorf("counted %v panics, want 1", got)
		}
	})
}

// The pause after a panic doubles while the loop keeps panicking, up to a
// cap, so a loop that panics on every round (a poison row) starts again a
// handful of times a minute, not every second; and reset runs after each
// panic.
func TestLoopBacksOffWhileItKeepsPanicking(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("pauses %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset the pause is %v, want %v", d, time.Second)
	}

	// Pauses of 1, 2, 4 and 8 s (the default's) fit 20 s, the next (16 s)
	// does not: exactly 5 rounds, on the bubble's clock. A fixed pause
	// would give about 20, none would give thousands.
	synctest.Test(t, func(t *testing.T) {
		g, _ := guard()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var rounds, resets atomic.Int32
		g.LoopResetting(ctx, "poison", func(context.Context) {
			rounds.Add(1)
			panic("every round")
		}, func() { resets.Add(1) })
		if n := rounds.Load(); n != 5 {
			t.Fatalf("%d rounds in 20 s with a doubling pause from %v, want 5", n, DefaultRestartPause)
		}
		if resets.Load() != rounds.Load() {
			t.Fatalf("reset ran %d times for %d panics", resets.Load(), rounds.Load())
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Errorf("the loop returned %v after it began, want when its context ended (20s)", took)
		}
	})
}
