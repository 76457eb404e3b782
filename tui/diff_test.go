package tui

import (
	"slices"
	"testing"
)

// ctrld's summaries of pending changes (desired.SummarizeRegion,
// SummarizePromotion, a kind's described state) read as diffs.
func TestSummaryDiff(t *testing.T) {
	for _, c := range []struct {
		summary, head string
		want          []diffLine
	}{
		{summary: "image app:1 -> app:2; replicas 3 -> 4", want: []diffLine{{'-', "image app:1"}, {'+', "image app:2"}, {'-', "replicas 3"}, {'+', "replicas 4"}}},
		{summary: "memory 64Mi -> 128Mi; port 80 -> 8080", want: []diffLine{{'-', "memory 64Mi"}, {'+', "memory 128Mi"}, {'-', "port 80"}, {'+', "port 8080"}}},
		{summary: "stopped", want: []diffLine{{'-', "status running"}, {'+', "status stopped"}}},
		{summary: "started", want: []diffLine{{'-', "status stopped"}, {'+', "status running"}}},
		{summary: "env A added; env B removed; env C changed; command changed", want: []diffLine{{'+', "env A"}, {'-', "env B"},
			{'~', "env C: value changed (values are never shown)"}, {'~', "command changed (the console is not shown it)"}}},
		{summary: "rollout to revision 7, wave 2 of 3: image app:1 -> app:2", head: "rollout to revision 7, wave 2 of 3",
			want: []diffLine{{'-', "image app:1"}, {'+', "image app:2"}}},
		{summary: "created", want: []diffLine{{'+', "created"}}},
		{summary: "deleted", want: []diffLine{{'-', "deleted"}}},
		{summary: "desired: running, 2 replicas, gw:1", want: []diffLine{{' ', "desired: running, 2 replicas, gw:1"}}},
		{summary: ""},
	} {
		head, got := summaryDiff(c.summary)
		if head != c.head || !slices.Equal(got, c.want) {
			t.Errorf("%q: head %q, lines %q; want %q, %q", c.summary, head, got, c.head, c.want)
		}
	}
}
