package tui

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// elide cleans s (see Clean) and fits it in n cells by cutting out its
// middle, "…" in its place. Server text that gets too long is mostly an
// error, and an error names what failed first and why it failed last
// ("deploy api: apply StatefulSet: … connection refused"): both ends stay
// readable, and the ellipsis says that something is missing, so a cut is
// never taken for a word. Table cells, whose start identifies the row, use
// clip instead.
func elide(s string, n int) string {
	s = Clean(s)
	w := ansi.StringWidth(s)
	switch {
	case w <= n:
		return s
	case n <= 0:
		return ""
	case n == 1:
		return "…"
	}
	// A third for the start (what failed), the rest for the end (why).
	head := (n - 1) / 3
	tail := n - 1 - head
	return ansi.Truncate(s, head, "") + "…" + ansi.TruncateLeft(s, w-tail, "")
}

// fit cleans s and fits it in at most lines lines of width cells, for the
// status line, the banner and notices: wrapped at spaces while that
// suffices; past that, the last line holds the rest elided from its middle
// (see elide), so the start (what failed) and the end (why) both show.
func fit(s string, width, lines int) string {
	if width <= 0 || lines <= 0 {
		return ""
	}
	wrapped := strings.Split(ansi.Wrap(Clean(s), width, ""), "\n")
	if len(wrapped) <= lines {
		return strings.Join(wrapped, "\n")
	}
	last := elide(strings.Join(wrapped[lines-1:], " "), width)
	return strings.Join(append(wrapped[:lines-1], last), "\n")
}
