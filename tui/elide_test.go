package tui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

func TestElideKeepsTheEndOfLongText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short enough", 12, "short enough"},
		{"Unavailable: dial tcp 127.0.0.1:7070: connect: connection refused", 30, "Unavailab…: connection refused"},
		{"apply failing: StatefulSet api: admission webhook denied: quota exceeded", 24, "apply f…: quota exceeded"},
		{"two", 1, "…"},
		{"two", 0, ""},
		{"wide 界界界界 end", 9, "wi…界 end"},
		// Cleaned before measuring: an escape sequence takes no cells and is
		// never cut in half.
		{"\x1b[31mred error text that is long\x1b[0m", 12, "red… is long"},
	} {
		got := elide(tc.in, tc.n)
		if got != tc.want {
			t.Errorf("elide(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if w := ansi.StringWidth(got); w > max(tc.n, 0) {
			t.Errorf("elide(%q, %d) is %d cells wide", tc.in, tc.n, w)
		}
		if ansi.StringWidth(Clean(tc.in)) > tc.n && tc.n > 0 && !strings.Contains(got, "…") {
			t.Errorf("elide(%q, %d) = %q: cut without an ellipsis", tc.in, tc.n, got)
		}
	}
}

func TestFitWrapsThenKeepsTheEnd(t *testing.T) {
	for _, tc := range []struct {
		in           string
		width, lines int
		want         string
	}{
		{"fits on one line", 20, 2, "fits on one line"},
		{"FAILED: stop worker in us-east: NotFound: deployment not found", 32, 2,
			"FAILED: stop worker in us-east:\nNotFound: deployment not found"},
		{"FAILED: stop worker in us-east: NotFound: deployment worker in region us-east: not found", 32, 2,
			"FAILED: stop worker in us-east:\nNotFound: …on us-east: not found"},
		{"one two three", 5, 1, "o…ree"},
	} {
		got := fit(tc.in, tc.width, tc.lines)
		if got != tc.want {
			t.Errorf("fit(%q, %d, %d) =\n%s\nwant\n%s", tc.in, tc.width, tc.lines, got, tc.want)
		}
		for _, line := range strings.Split(got, "\n") {
			if ansi.StringWidth(line) > tc.width {
				t.Errorf("fit(%q, %d, %d): line %q too wide", tc.in, tc.width, tc.lines, line)
			}
		}
	}
}
