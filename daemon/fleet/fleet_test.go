package fleet

import (
	"strings"
	"testing"
	"time"
)

func mustWindow(t *testing.T, w Window, tz string) Window {
	t.Helper()
	parsed, err := ParseWindow(w, tz)
	if err != nil {
		t.Fatalf("ParseWindow(%+v, %q): %v", w, tz, err)
	}
	return parsed
}

func at(t *testing.T, s, tz string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Weekdays outside office hours in Berlin, as two windows: each weekday
// evening until the next morning, and the weekend.
func TestWeekdaysOutsideOfficeHoursInBerlin(t *testing.T) {
	evenings := mustWindow(t, Window{Name: "evenings", Schedule: "0 17 * * 1-5", Duration: 16 * time.Hour}, "Europe/Berlin")
	weekend := mustWindow(t, Window{Name: "weekend", Schedule: "0 0 * * 6", Duration: 57 * time.Hour}, "Europe/Berlin")
	s := &State{Windows: []Window{evenings, weekend}}
	s.Rollouts = []Rollout{{ID: 1, Queued: true, Waves: [][]string{{"eu-west"}}}}
	for _, c := range []struct {
		now, until string // Berlin time; until "" when open
	}{
		{"2026-12-01 10:00", ""},                 // Tuesday, office hours
		{"2026-12-01 16:59", ""},                 // a minute before
		{"2026-12-01 17:00", "2026-12-02 09:00"}, // Tuesday evening
		{"2026-12-02 08:59", "2026-12-02 09:00"}, // Wednesday, early
		{"2026-12-02 09:00", ""},                 // opens
		{"2026-12-04 18:00", "2026-12-07 09:00"}, // Friday evening: chained through the weekend to Monday
		{"2026-12-05 12:00", "2026-12-07 09:00"}, // Saturday
		{"2026-12-07 09:30", ""},                 // Monday, office hours
	} {
		now := at(t, c.now, "Europe/Berlin")
		h := s.Plan(now).Queued(1)
		if c.until == "" {
			if h.Held() {
				t.Errorf("at %s: held (%s), want open", c.now, h.Why)
			}
			continue
		}
		want := at(t, c.until, "Europe/Berlin")
		if h.Kind != KindFreeze || !h.Until.Equal(want) {
			t.Errorf("at %s: %+v, want frozen until %s", c.now, h, want)
		}
		if !strings.Contains(h.Why, "frozen until Mon 09:00 CET") && c.until == "2026-12-07 09:00" {
			t.Errorf("at %s: why %q, want it to say frozen until Mon 09:00 CET", c.now, h.Why)
		}
	}
}

// A firing's duration is wall time: across the switch to summer time the
// window closes at 17:00 local and reopens 16 hours later, at 10:00.
func TestAWindowAcrossDaylightSavingTime(t *testing.T) {
	w := mustWindow(t, Window{Name: "nights", Schedule: "0 17 * * *", Duration: 16 * time.Hour}, "Europe/Berlin")
	until, closed := w.ClosedUntil(at(t, "2027-03-27 23:00", "Europe/Berlin"))
	if want := at(t, "2027-03-28 10:00", "Europe/Berlin"); !closed || !until.Equal(want) {
		t.Errorf("closed %v until %s, want until %s", closed, until, want)
	}
}

func TestOneOffWindow(t *testing.T) {
	start, end := at(t, "2026-12-24 00:00", "UTC"), at(t, "2026-12-27 00:00", "UTC")
	w := mustWindow(t, Window{Name: "holidays", StartsAt: start, EndsAt: end}, "")
	for _, c := range []struct {
		now    time.Time
		closed bool
	}{{start.Add(-time.Second), false}, {start, true}, {end.Add(-time.Second), true}, {end, false}} {
		if _, closed := w.ClosedUntil(c.now); closed != c.closed {
			t.Errorf("at %s: closed %v, want %v", c.now, closed, c.closed)
		}
	}
	if next := w.NextClose(start.Add(-time.Hour)); !next.Equal(start) {
		t.Errorf("next close %s, want %s", next, start)
	}
}

func TestBadWindowsAreRefusedNamingTheField(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		w     Window
		tz    string
		field string
	}{
		{"no name", Window{Schedule: "0 17 * * *", Duration: time.Hour}, "", "name:"},
		{"a name with spaces", Window{Name: "my window", Schedule: "0 17 * * *", Duration: time.Hour}, "", "name:"},
		{"a schedule that cannot be read", Window{Name: "w", Schedule: "every evening", Duration: time.Hour}, "", "schedule:"},
		{"six fields", Window{Name: "w", Schedule: "0 0 17 * * *", Duration: time.Hour}, "", "schedule:"},
		{"a time zone in the schedule", Window{Name: "w", Schedule: "CRON_TZ=Europe/Berlin 0 17 * * *", Duration: time.Hour}, "", "schedule:"},
		{"an unknown time zone", Window{Name: "w", Schedule: "0 17 * * *", Duration: time.Hour}, "Europe/Atlantis", "time_zone:"},
		{"the machine's own zone", Window{Name: "w", Schedule: "0 17 * * *", Duration: time.Hour}, "Local", "time_zone:"},
		{"no duration", Window{Name: "w", Schedule: "0 17 * * *"}, "", "duration:"},
		{"a duration too long", Window{Name: "w", Schedule: "0 17 * * *", Duration: 40 * 24 * time.Hour}, "", "duration:"},
		{"neither schedule nor dates", Window{Name: "w"}, "", "schedule:"},
		{"both", Window{Name: "w", Schedule: "0 17 * * *", Duration: time.Hour, StartsAt: now, EndsAt: now.Add(time.Hour)}, "", "schedule:"},
		{"an end before the start", Window{Name: "w", StartsAt: now, EndsAt: now.Add(-time.Hour)}, "", "ends_at:"},
		{"a start without an end", Window{Name: "w", StartsAt: now}, "", "ends_at:"},
		{"a one-off window with a duration", Window{Name: "w", StartsAt: now, EndsAt: now.Add(time.Hour), Duration: time.Hour}, "", "duration:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseWindow(c.w, c.tz)
			if err == nil || !strings.HasPrefix(err.Error(), c.field) {
				t.Errorf("got %v, want an error starting %q", err, c.field)
			}
		})
	}
}

// Pacing: two canaries at most in eu-west, three rollouts at most in
// acme/prod; those beyond wait in the order they were made, and one a
// halt holds keeps no place.
func TestPacingQueuesInOrder(t *testing.T) {
	prod := func(id int, queued bool, first ...string) Rollout {
		return Rollout{ID: id, WorkspaceID: "acme", EnvironmentID: "prod", Queued: queued, Waves: [][]string{first, {"us-east"}}}
	}
	s := &State{
		Bounds: []Bound{{Scope: Scope{Region: "eu-west"}, Max: 2}, {Scope: Scope{WorkspaceID: "acme", EnvironmentID: "prod"}, Max: 3}},
		Rollouts: []Rollout{
			prod(1, false, "eu-west"),
			prod(2, true, "eu-west"),
			prod(3, true, "eu-west"),  // third canary in eu-west: waits
			prod(4, true, "ap-south"), // no canary bound; third in prod: starts
			prod(5, true, "ap-south"), // fourth in prod: waits
		},
	}
	p := s.Plan(time.Now())
	if got := p.Start(); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Fatalf("start %v, want [2 4]", got)
	}
	if h := p.Queued(3); h.Kind != KindPacing || h.Place != 1 || !strings.Contains(h.Why, "2 of 2 first waves in progress in eu-west") {
		t.Errorf("rollout 3: %+v", h)
	}
	if h := p.Queued(5); h.Kind != KindPacing || !strings.Contains(h.Why, "3 of 3 rollouts in flight in environment acme/prod") {
		t.Errorf("rollout 5: %+v", h)
	}
	inUse, queued := p.Usage(s.Bounds[0])
	if inUse != 1 || queued != 1 {
		t.Errorf("eu-west's bound: %d in use, %d queued; want 1 and 1", inUse, queued)
	}

	// A halt of ap-south holds 4, which then keeps no place: 5 is held
	// too, and nothing in prod's queue moves ahead of another.
	s.Halts = []Halt{{ID: 7, Scope: Scope{Region: "ap-south"}, Reason: "incident", Actor: "alice"}}
	p = s.Plan(time.Now())
	if got := p.Start(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("with ap-south halted: start %v, want [2]", got)
	}
	if h := p.Queued(4); h.Kind != KindHalt || h.HaltID != 7 {
		t.Errorf("rollout 4: %+v, want the halt", h)
	}
	// FIFO: once 3 waits for eu-west, a later rollout with eu-west waits
	// behind it even when prod has room.
	s.Halts = nil
	s.Rollouts = append(s.Rollouts[:3], prod(6, true, "eu-west"))
	p = s.Plan(time.Now())
	if h := p.Queued(6); h.Kind != KindPacing || h.Place != 2 {
		t.Errorf("rollout 6: %+v, want 2nd in eu-west's queue", h)
	}
}

func TestHaltsAndBreakGlass(t *testing.T) {
	r := Rollout{ID: 1, WorkspaceID: "acme", EnvironmentID: "prod", Wave: 0, Waves: [][]string{{"eu-west"}, {"us-east"}, {"ap-south"}}}
	for _, c := range []struct {
		scope         Scope
		pauses, holds bool // holds: its next wave
	}{
		{Scope{}, true, true},
		{Scope{WorkspaceID: "acme", EnvironmentID: "prod"}, true, true},
		{Scope{WorkspaceID: "acme", EnvironmentID: "dev"}, false, false},
		{Scope{Region: "eu-west"}, true, false}, // its current wave
		{Scope{Region: "us-east"}, true, true},  // its next
		{Scope{Region: "ap-south"}, false, false},
	} {
		h := Halt{ID: 3, Scope: c.scope}
		if got := h.Pauses(r); got != c.pauses {
			t.Errorf("a halt of %s pauses it: %v, want %v", c.scope, got, c.pauses)
		}
		p := (&State{Halts: []Halt{h}, Rollouts: []Rollout{r}}).Plan(time.Now())
		if got := p.Next(r).Held(); got != c.holds {
			t.Errorf("a halt of %s holds its next wave: %v, want %v", c.scope, got, c.holds)
		}
		glass := r
		glass.BreakGlass = true
		if p.Next(glass).Held() {
			t.Errorf("a halt of %s holds a rollout taken through on purpose", c.scope)
		}
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
