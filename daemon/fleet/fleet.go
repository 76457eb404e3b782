package fleet

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Scope is where a control applies: a workspace's environment, a region,
// or, with all empty, everywhere.
type Scope struct {
	WorkspaceID   string
	EnvironmentID string
	Region        string
}

// String names the scope for people.
func (s Scope) String() string {
	switch {
	case s.Region != "":
		return "region " + s.Region
	case s.EnvironmentID != "":
		return "environment " + s.WorkspaceID + "/" + s.EnvironmentID
	}
	return "every environment"
}

// environment tells whether the scope is everywhere or r's environment
// (a region scope is neither).
func (s Scope) environment(r Rollout) bool {
	return s.Region == "" && (s.EnvironmentID == "" || s.WorkspaceID == r.WorkspaceID && s.EnvironmentID == r.EnvironmentID)
}

// Rollout is what a plan reads of a rollout in flight.
type Rollout struct {
	ID            int
	DeploymentID  string
	WorkspaceID   string
	EnvironmentID string
	// Queued: no wave started yet.
	Queued bool
	// Wave is the index of the wave in progress; Waves their regions.
	Wave  int
	Waves [][]string
	// BreakGlass: an operator took it through every hold on purpose.
	BreakGlass bool
}

// hasRegion tells whether wave i of r has the region.
func (r Rollout) hasRegion(i int, region string) bool {
	return i >= 0 && i < len(r.Waves) && slices.Contains(r.Waves[i], region)
}

// Halt is a fleet halt that stands.
type Halt struct {
	ID int
	Scope
	Reason string
	Actor  string
	Since  time.Time
}

// Holds tells whether the halt holds wave i of r from starting.
func (h Halt) Holds(r Rollout, i int) bool {
	if h.Region != "" {
		return r.hasRegion(i, h.Region)
	}
	return h.environment(r)
}

// Pauses tells whether making the halt pauses r, a rollout in progress:
// one in its environment, or whose current or next wave has its region.
func (h Halt) Pauses(r Rollout) bool {
	return h.Holds(r, r.Wave) || h.Region != "" && h.Holds(r, r.Wave+1)
}

// Bound is a pacing bound: in an environment, at most Max rollouts
// started and in flight; in a region, at most Max first waves with it in
// progress.
type Bound struct {
	Scope
	Max int
}

// Kind is what holds a rollout.
type Kind string

// The kinds of holds.
const (
	KindHalt   Kind = "halt"
	KindFreeze Kind = "freeze"
	KindPacing Kind = "pacing"
)

// Hold is why a rollout may not start a wave now; the zero Hold holds
// nothing.
type Hold struct {
	Kind Kind
	// Why says it for people: "halted by halt #3 (alice: incident
	// 4711)", "frozen until Mon 09:00 CET by window weekend", "queued,
	// 2nd in line: 2 of 2 rollouts of acme/prod in flight".
	Why    string
	HaltID int
	// Window and Until: the freeze window that holds it, and when the
	// last window closed then reopens (the zero time when unknown).
	Window string
	Until  time.Time
	// Place is its place in the pacing queue, from 1.
	Place int
}

// Held tells whether the hold holds anything.
func (h Hold) Held() bool { return h.Kind != "" }

// State is the fleet's controls, and the rollouts in flight, at one read.
type State struct {
	Halts   []Halt
	Windows []Window
	Bounds  []Bound
	// Rollouts are those in flight, in the order they were made (id).
	Rollouts []Rollout
}

// Plan is what the state allows at one time: which queued rollouts may
// start their first wave, and what holds every other.
type Plan struct {
	state *State
	now   time.Time
	start []int
	holds map[int]Hold
	// byID indexes state.Rollouts; frozen memoizes freeze per
	// environment: the driver asks for every rollout each round, and a
	// dense schedule's firings would be walked once per rollout.
	byID   map[int]int
	frozen map[Scope]Hold
}

// Plan says, at now, which queued rollouts may start and why each other
// waits. Queued rollouts are taken in the order they were made: one a
// pacing bound holds keeps the bound's place, so a later one of the same
// bound waits behind it even when it would fit (the bound's queue is
// first come, first served); one a halt or window holds keeps no place.
func (s *State) Plan(now time.Time) *Plan {
	p := &Plan{state: s, now: now, holds: map[int]Hold{}, byID: make(map[int]int, len(s.Rollouts)), frozen: map[Scope]Hold{}}
	for i, r := range s.Rollouts {
		p.byID[r.ID] = i
	}
	started := map[Scope]int{}
	for _, r := range s.Rollouts {
		if r.Queued {
			continue
		}
		for _, b := range s.Bounds {
			if b.counts(r) {
				started[b.Scope]++
			}
		}
	}
	waiting := map[Scope]int{} // queued behind a full bound, per bound
	for _, r := range s.Rollouts {
		if !r.Queued {
			continue
		}
		if r.BreakGlass {
			p.start = append(p.start, r.ID)
			p.count(r, started)
			continue
		}
		if h := p.Wave(r, 0); h.Held() {
			p.holds[r.ID] = h
			continue
		}
		if h, ok := p.pacing(r, started, waiting); ok {
			p.holds[r.ID] = h
			continue
		}
		p.start = append(p.start, r.ID)
		p.count(r, started)
	}
	return p
}

// counts tells whether the bound counts r, a rollout that started (or
// would, starting its first wave).
func (b Bound) counts(r Rollout) bool {
	if b.Region != "" {
		return r.Wave == 0 && r.hasRegion(0, b.Region)
	}
	return b.environment(r)
}

// count adds r, starting, to the bounds that count it.
func (p *Plan) count(r Rollout, started map[Scope]int) {
	first := r
	first.Wave = 0
	for _, b := range p.state.Bounds {
		if b.counts(first) {
			started[b.Scope]++
		}
	}
}

// pacing is the hold of the first bound that r's start would exceed, or
// behind whose queue it falls; each such bound's queue grows by one.
func (p *Plan) pacing(r Rollout, started, waiting map[Scope]int) (Hold, bool) {
	first := r
	first.Wave = 0
	var hold Hold
	for _, b := range p.state.Bounds {
		if !b.counts(first) || started[b.Scope] < b.Max && waiting[b.Scope] == 0 {
			continue
		}
		waiting[b.Scope]++
		if hold.Held() {
			continue
		}
		what := fmt.Sprintf("%d of %d rollouts in flight in %s", started[b.Scope], b.Max, b.Scope)
		if b.Region != "" {
			what = fmt.Sprintf("%d of %d first waves in progress in %s", started[b.Scope], b.Max, b.Region)
		}
		hold = Hold{Kind: KindPacing, Place: waiting[b.Scope],
			Why: fmt.Sprintf("queued, %s in line: %s", ordinal(waiting[b.Scope]), what)}
	}
	return hold, hold.Held()
}

// Start is the queued rollouts that may start their first wave now, in
// the order they were made.
func (p *Plan) Start() []int { return p.start }

// MayStart tells whether the queued rollout id may start now.
func (p *Plan) MayStart(id int) bool { return slices.Contains(p.start, id) }

// Queued is what holds the queued rollout id (the zero Hold when it may
// start).
func (p *Plan) Queued(id int) Hold { return p.holds[id] }

// Next is what holds r's next wave from starting, once its current one
// passes (the zero Hold for none, and after the last).
func (p *Plan) Next(r Rollout) Hold {
	if r.Wave+1 >= len(r.Waves) {
		return Hold{}
	}
	return p.Wave(r, r.Wave+1)
}

// Wave is the halt or freeze window that holds wave i of r from starting
// now (the zero Hold when none does, or r is taken through).
func (p *Plan) Wave(r Rollout, i int) Hold {
	if r.BreakGlass {
		return Hold{}
	}
	for _, h := range p.state.Halts {
		if h.Holds(r, i) {
			return Hold{Kind: KindHalt, HaltID: h.ID, Why: fmt.Sprintf("halted by halt #%d (%s: %s)", h.ID, h.Actor, h.Reason)}
		}
	}
	return p.freeze(r)
}

// freeze is the hold of the freeze windows closed now in r's scope: until
// the last of them reopens, windows that close as one reopens chained.
func (p *Plan) freeze(r Rollout) Hold {
	env := Scope{WorkspaceID: r.WorkspaceID, EnvironmentID: r.EnvironmentID}
	if hold, ok := p.frozen[env]; ok {
		return hold
	}
	hold := p.freezeAt(r)
	p.frozen[env] = hold
	return hold
}

// freezeAt is freeze, judged.
func (p *Plan) freezeAt(r Rollout) Hold {
	var hold Hold
	at := p.now
	// Each pass moves at to the end of a window closed at it; a chain
	// longer than the windows' number is a loop of zero-length ones.
	for range len(p.state.Windows) + 1 {
		moved := false
		for _, w := range p.state.Windows {
			if !w.covers(r) {
				continue
			}
			if until, closed := w.ClosedUntil(at); closed && until.After(at) {
				at, moved = until, true
				hold = Hold{Kind: KindFreeze, Window: w.Name, Until: until, Why: "frozen until " + w.format(until, p.now) + " by window " + w.Name}
			}
		}
		if !moved {
			break
		}
	}
	return hold
}

// ordinal is 1st, 2nd, 3rd, 4th...
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// Candidate is the ID a rollout not made yet takes in a plan: after every
// other, as it will be made last.
const Candidate = math.MaxInt

// With is the state with r added as the newest rollout in flight (a
// rollout about to be made, whose first wave's start the plan decides).
func (s *State) With(r Rollout) *State {
	out := *s
	out.Rollouts = append(slices.Clip(s.Rollouts), r)
	return &out
}

// Describe says a hold in one line for a refusal: what holds, and how past
// it.
func (h Hold) Describe() string {
	var how []string
	switch h.Kind {
	case KindHalt:
		how = append(how, fmt.Sprintf("lift it (fleet resume %d)", h.HaltID))
	case KindFreeze:
		how = append(how, "wait for the window to open")
	case KindPacing:
		how = append(how, "wait for its turn")
	}
	how = append(how, "or break glass with a reason")
	return h.Why + ": " + strings.Join(how, ", ")
}

// Of is what holds the rollout id in flight: a queued one's first wave,
// a started one's next (the zero Hold for none, or an id not in flight).
func (p *Plan) Of(id int) Hold {
	r, ok := p.Rollout(id)
	switch {
	case !ok:
		return Hold{}
	case r.Queued:
		return p.holds[id]
	}
	return p.Next(r)
}

// Rollout is the rollout id as the plan read it (false when it is not in
// flight).
func (p *Plan) Rollout(id int) (Rollout, bool) {
	i, ok := p.byID[id]
	if !ok {
		return Rollout{}, false
	}
	return p.state.Rollouts[i], true
}

// Usage is how many rollouts the bound counts now, and how many wait for
// it, queued.
func (p *Plan) Usage(b Bound) (inUse, queued int) {
	for _, r := range p.state.Rollouts {
		switch {
		case !r.Queued && b.counts(r):
			inUse++
		case r.Queued:
			first := r
			first.Wave = 0
			if h := p.holds[r.ID]; h.Kind == KindPacing && b.counts(first) {
				queued++
			}
		}
	}
	return inUse, queued
}

// State is the state the plan judged.
func (p *Plan) State() *State { return p.state }

// Now is the time the plan judged at.
func (p *Plan) Now() time.Time { return p.now }
