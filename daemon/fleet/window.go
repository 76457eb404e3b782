package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// Time zones from the binary itself, not the machine's tzdata: a
	// replica on a minimal image reads a window as every other does.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Window is a freeze window: while it is closed, no rollout in its
// environment (or any, when it names none) starts a wave.
type Window struct {
	Name          string
	WorkspaceID   string
	EnvironmentID string
	// Schedule (recurring windows): each of its firings, in Location,
	// closes the window for Duration.
	Schedule string
	Location *time.Location
	Duration time.Duration
	// StartsAt and EndsAt (one-off windows): closed from the one until
	// the other.
	StartsAt, EndsAt time.Time

	every cron.Schedule
}

// Bounds of a window.
const (
	// MaxDuration is the longest a recurring window's firing closes it:
	// longer freezes are one-off windows, whose end is written down.
	MaxDuration = 31 * 24 * time.Hour
	// MaxOneOff is the longest one-off window.
	MaxOneOff = 366 * 24 * time.Hour
	// maxFirings bounds the firings ClosedUntil walks through: a
	// schedule firing every minute with MaxDuration is 44,640.
	maxFirings = 50_000
)

// ErrInvalid marks a window that cannot be read.
var ErrInvalid = errors.New("invalid freeze window")

// parser reads the five standard cron fields (minute, hour, day of
// month, month, day of week) and the @daily-style descriptors, as
// Kubernetes CronJobs do; the time zone is the window's own field, not a
// CRON_TZ prefix.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseWindow checks a window and makes it ready to use: a recurring one
// has a schedule, a time zone and a duration of 1 minute to MaxDuration;
// a one-off one ends after it starts, within MaxOneOff. The error names
// the field that is wrong, as given (name, schedule, time_zone,
// duration, starts_at, ends_at).
func ParseWindow(w Window, timeZone string) (Window, error) {
	if w.Name == "" || len(w.Name) > 63 || strings.Trim(w.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return w, fmt.Errorf("name: %w: 1-63 of a-z, 0-9 and -, got %q", ErrInvalid, w.Name)
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil || strings.HasPrefix(timeZone, "/") || timeZone == "Local" {
		return w, fmt.Errorf("time_zone: %w: %q is not an IANA time zone (like Europe/Berlin, or UTC)", ErrInvalid, timeZone)
	}
	w.Location = loc
	oneOff := !w.StartsAt.IsZero() || !w.EndsAt.IsZero()
	switch {
	case w.Schedule != "" && oneOff:
		return w, fmt.Errorf("schedule: %w: a window is recurring (schedule and duration) or once (starts_at and ends_at), not both", ErrInvalid)
	case w.Schedule != "":
		if strings.Contains(w.Schedule, "TZ=") {
			return w, fmt.Errorf("schedule: %w: give the time zone as time_zone, not in the schedule", ErrInvalid)
		}
		every, err := parser.Parse(w.Schedule)
		if err != nil {
			return w, fmt.Errorf("schedule: %w: %q: %v (five fields: minute hour day-of-month month day-of-week, e.g. \"0 17 * * 1-5\")", ErrInvalid, w.Schedule, err)
		}
		if w.Duration < time.Minute || w.Duration > MaxDuration {
			return w, fmt.Errorf("duration: %w: 1m to %s, got %s", ErrInvalid, MaxDuration, w.Duration)
		}
		w.every = every
	case oneOff:
		if w.StartsAt.IsZero() || w.EndsAt.IsZero() {
			return w, fmt.Errorf("ends_at: %w: a one-off window has both starts_at and ends_at", ErrInvalid)
		}
		if !w.EndsAt.After(w.StartsAt) {
			return w, fmt.Errorf("ends_at: %w: %s is not after starts_at %s", ErrInvalid, w.EndsAt.Format(time.RFC3339), w.StartsAt.Format(time.RFC3339))
		}
		if w.EndsAt.Sub(w.StartsAt) > MaxOneOff {
			return w, fmt.Errorf("ends_at: %w: at most %s after starts_at", ErrInvalid, MaxOneOff)
		}
		if w.Duration != 0 {
			return w, fmt.Errorf("duration: %w: a one-off window ends at ends_at; duration is for recurring ones", ErrInvalid)
		}
	default:
		return w, fmt.Errorf("schedule: %w: give a schedule and duration (recurring) or starts_at and ends_at (once)", ErrInvalid)
	}
	return w, nil
}

// ClosedUntil tells whether the window is closed at t, and until when:
// for a recurring window, the end of the last firing at or before t
// whose duration has not run out.
func (w Window) ClosedUntil(t time.Time) (time.Time, bool) {
	if w.every == nil {
		return w.EndsAt, !t.Before(w.StartsAt) && t.Before(w.EndsAt)
	}
	// A firing f closes [f, f+Duration): t is in it when f is in
	// (t-Duration, t]. Next gives firings after a time, whole seconds.
	var until time.Time
	closed := false
	f := w.every.Next(t.Add(-w.Duration).In(w.Location))
	for range maxFirings {
		if f.IsZero() || f.After(t) {
			break
		}
		until, closed = f.Add(w.Duration), true
		f = w.every.Next(f)
	}
	return until, closed
}

// NextClose is when the window next closes after t (the zero time when
// it never will).
func (w Window) NextClose(t time.Time) time.Time {
	if w.every == nil {
		if t.Before(w.StartsAt) {
			return w.StartsAt
		}
		return time.Time{}
	}
	return w.every.Next(t.In(w.Location))
}

// covers tells whether the window holds r: one of its environment, or
// any when it names none.
func (w Window) covers(r Rollout) bool {
	return w.EnvironmentID == "" || w.WorkspaceID == r.WorkspaceID && w.EnvironmentID == r.EnvironmentID
}

// format writes t in the window's time zone for people: the weekday and
// time when it is within six days of now, the date too beyond.
func (w Window) format(t, now time.Time) string {
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	if t.Sub(now) > 6*24*time.Hour {
		return t.In(loc).Format("Mon 2 Jan 15:04 MST")
	}
	return t.In(loc).Format("Mon 15:04 MST")
}
