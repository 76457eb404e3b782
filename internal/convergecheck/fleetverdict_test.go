package convergecheck

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// The fleet verdicts judge a start known to lie in [lo, hi] against the
// controls committed before it: only a start certainly inside a closed
// window, or a halt, or beyond a bound, is a violation.
func TestFleetVerdictsJudgeWhatIsCertain(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	sec := func(n float64) time.Time { return at.Add(time.Duration(n * float64(time.Second))) }
	r := &rolloutObs{id: 1, deployment: "api", workspace: "acme", env: "prod", waves: [][]string{{"eu"}, {"us"}}}
	window := &windowRec{name: "w1", scope: scopeRec{workspace: "acme", env: "prod"}, starts: sec(10), ends: sec(20), from: sec(5), until: never}
	other := &windowRec{name: "w2", scope: scopeRec{workspace: "beta", env: "prod2"}, starts: sec(0), ends: sec(100), from: sec(0), until: never}
	for _, c := range []struct {
		name   string
		lo, hi time.Time
		w      *windowRec
		want   int
	}{
		{"inside", sec(11), sec(12), window, 1},
		{"may have started before it closed", sec(9.9), sec(12), window, 0},
		{"may have started after it opened", sec(19), sec(20), window, 0},
		{"another environment's", sec(11), sec(12), other, 0},
		{"set after the start", sec(4), sec(4.1), &windowRec{scope: window.scope, starts: sec(0), ends: sec(20), from: sec(4.05), until: never}, 0},
		{"deleted before the start", sec(11), sec(12), &windowRec{scope: window.scope, starts: sec(0), ends: sec(20), from: sec(1), until: sec(10.5)}, 0},
	} {
		if got := windowViolations(r, "us", c.lo, c.hi, "start", []*windowRec{c.w}); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.name, len(got), got, c.want)
		}
	}
	every, err := cron.ParseStandard("*/2 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	recurring := &windowRec{scope: scopeRec{}, every: every, duration: time.Minute, from: at.Add(-time.Hour), until: never}
	if !recurring.closedThroughout(at.Add(10*time.Second), at.Add(50*time.Second)) || recurring.closedThroughout(at.Add(50*time.Second), at.Add(70*time.Second)) {
		t.Errorf("a window closed a minute every other minute: closed from :10 to :50, not from :50 to 1:10")
	}

	halt := &haltRec{id: 1, scope: scopeRec{region: "us"}, answered: sec(5), lifted: sec(30)}
	if got := haltViolations(r, "us", sec(6), sec(7), "start", []*haltRec{halt}); len(got) != 1 {
		t.Errorf("a start of us's wave under a halt of us: %v", got)
	}
	if got := haltViolations(r, "eu", sec(6), sec(7), "start", []*haltRec{halt}); len(got) != 0 {
		t.Errorf("a start of eu's wave under a halt of us: %v", got)
	}
	if got := haltViolations(r, "us", sec(29), sec(31), "start", []*haltRec{halt}); len(got) != 0 {
		t.Errorf("a start that may have come after the lift was sent: %v", got)
	}

	// Two rollouts of one environment, a bound of 1: the second started
	// while the first was in flight.
	first := &rolloutObs{id: 2, deployment: "web", workspace: "acme", env: "prod", waves: [][]string{{"eu"}, {"us"}},
		start: map[string]time.Time{"eu": sec(1)}, end: sec(50)}
	r.start = map[string]time.Time{"eu": sec(10)}
	all := map[int]*rolloutObs{1: r, 2: first}
	bound := &boundRec{scope: scopeRec{workspace: "acme", env: "prod"}, max: 1, from: sec(0), until: never}
	if got := paceViolations(r, sec(10), all, []*boundRec{bound}, nil); len(got) != 1 {
		t.Errorf("a second rollout in flight under a bound of 1: %v", got)
	}
	first.end = sec(10.5) // ended a moment after: it may have been read ended
	if got := paceViolations(r, sec(10), all, []*boundRec{bound}, nil); len(got) != 0 {
		t.Errorf("a start a moment after the other's end: %v", got)
	}
	region := &boundRec{scope: scopeRec{region: "eu"}, max: 1, from: sec(0), until: never}
	first.end, first.waiting = sec(50), map[string]time.Time{"us": sec(5)}
	first.start["us"] = sec(6) // its canary passed before
	if got := paceViolations(r, sec(10), all, []*boundRec{region}, nil); len(got) != 0 {
		t.Errorf("a canary after the other's canary passed: %v", got)
	}
}
