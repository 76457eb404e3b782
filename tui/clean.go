package tui

import (
	"strings"
	"unicode"

	"github.com/charmbracelet/x/ansi"
)

// Clean makes text that came from the server safe to show on one line of an
// operator's terminal. Agents write some of it (an agent's last error is
// whatever its token holder reported), so it may carry escape sequences
// that retitle the terminal, clear the screen, fake colours or move the
// cursor over what the console drew. Clean drops every ANSI escape sequence
// (CSI, OSC, DCS, ...), every remaining C0 and C1 control character and
// every Unicode format character (category Cf: the bidirectional controls,
// which reorder what is shown, zero-width spaces and joiners, the BOM, soft
// hyphens, tag characters; all of them hide or disguise text), turns tabs
// and line breaks, Unicode's U+2028 and U+2029 included, into spaces (every
// place that shows server text is one line or one table cell) and replaces
// invalid UTF-8 with U+FFFD.
//
// It is for display only: requests carry the server's own IDs, not their
// cleaned form.
func Clean(s string) string {
	// Invalid bytes first: a lone 0x9b would otherwise start a sequence.
	s = ansi.Strip(strings.ToValidUTF8(s, "\uFFFD"))
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r' || unicode.In(r, unicode.Zl, unicode.Zp):
			return ' '
		case Unsafe(r):
			return -1
		}
		return r
	}, s)
}

// Unsafe reports whether Clean keeps r from the terminal, dropping it or
// turning it into a space: a C0 or C1 control character (DEL and the
// escape sequences' introducers included), a Unicode format character
// (category Cf) or a line or paragraph separator. What shows server text
// without Clean (the one-shot commands' JSON) escapes exactly these.
func Unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp)
}

// CleanLog is Clean for log text, which is many lines: it keeps line
// breaks and tabs, and drops everything else Clean drops.
func CleanLog(s string) string {
	s = ansi.Strip(strings.ToValidUTF8(s, "\uFFFD"))
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r' || unicode.In(r, unicode.Zl, unicode.Zp):
			return '\n'
		case Unsafe(r):
			return -1
		}
		return r
	}, s)
}
