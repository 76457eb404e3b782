package tui

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// span is a duration as an on-call engineer reads it at a glance: 45s, 3m,
// 2h.
func span(d time.Duration) string {
	d = max(0, d.Round(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return span(now.Sub(t)) + " ago"
}

// since says when something began, on the clock of now's zone, and how
// long ago: "since 14:02 (4m)". Empty when it is not known.
func since(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return ""
	}
	t := ts.AsTime()
	return fmt.Sprintf("since %s (%s)", t.In(now.Location()).Format("15:04"), span(now.Sub(t)))
}

// asOfText says how old data read at t is: "as of 14:02:11 (39s ago)".
func asOfText(t, now time.Time) string {
	return fmt.Sprintf("as of %s (%s)", t.In(now.Location()).Format("15:04:05"), ago(now, t))
}
