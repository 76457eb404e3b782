package recovery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func guard() (Guard, *bytes.Buffer) {
	var buf bytes.Buffer
	return Guard{
		Log:    slog.New(slog.NewTextHandler(&buf, nil)),
		Panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"}),
	}, &buf
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
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
	if got := value(g.Panics.WithLabelValues("job")); got != 1 {
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

// A loop that panics is started again; it stops for good once ctx ends.
func TestLoopRestartsAfterAPanicUntilTheContextEnds(t *testing.T) {
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
	deadline := time.Now().Add(5 * time.Second)
	for rounds.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the loop was not started again after its panic")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := value(g.Panics.WithLabelValues("loop")); got != 1 {
		t.Errorf("counted %v panics, want 1", got)
	}
}
