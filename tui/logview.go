package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/viewport"
	"github.com/charmbracelet/x/ansi"
)

// logView is a log page's window on its lines: the line at its top, or
// pinned to the newest (a follow's new lines stay in view until the
// operator scrolls up, and again once back at the bottom), at the size
// it was last laid out. It scrolls by lines and wraps only the lines in
// view, and hands bubbles' viewport the rows it shows. (Given the whole
// log with soft wrap, the viewport measures every line at every frame
// and every piece: 0.2 s for 2 MiB, and the console of an SSH session
// runs in ctrld.)
type logView struct {
	lines         []string // the filter's
	top           int      // the first line shown, while not pinned
	pinned        bool
	width, height int
}

// laid is v at the size of a page's view in pc.
func (v logView) laid(pc pageContext) logView {
	v.width, v.height = max(pc.width, 1), max(pc.height, 1)
	return v
}

// rows is line wrapped to v's width, one row at least.
func (v logView) rows(line string) []string {
	w := ansi.StringWidth(line)
	if w <= v.width {
		return []string{line}
	}
	var out []string
	for at := 0; at < w; at += v.width {
		out = append(out, ansi.Cut(line, at, at+v.width))
	}
	return out
}

// bottom is the top line at which the last line ends at the bottom of the
// view.
func (v logView) bottom() int {
	rows, i := 0, len(v.lines)
	for i > 0 {
		n := len(v.rows(v.lines[i-1]))
		if rows+n > v.height {
			break
		}
		rows += n
		i--
	}
	if i == len(v.lines) && i > 0 {
		i-- // the last line alone is taller than the view
	}
	return i
}

// first is the line at the top of the view.
func (v logView) first() int {
	if v.pinned {
		return v.bottom()
	}
	return min(v.top, v.bottom())
}

func (v logView) atTop() bool    { return v.first() == 0 }
func (v logView) atBottom() bool { return v.pinned || v.top >= v.bottom() }

// scrolled is v moved by n lines (up when negative), pinned once at the
// bottom.
func (v logView) scrolled(n int) logView {
	last := v.bottom()
	v.top = max(0, min(v.first()+n, last))
	v.pinned = v.top >= last
	return v
}

// page is how many lines a page up or down moves.
func (v logView) page() int { return max(1, v.height-1) }

// shown is the rows in view and the lines they are of, [from, to).
func (v logView) shown() (rows []string, from, to int) {
	if v.pinned {
		// From the newest line back: the last row is the newest's end.
		to, from = len(v.lines), len(v.lines)
		for from > 0 && len(rows) < v.height {
			from--
			rows = append(v.rows(v.lines[from]), rows...)
		}
		return rows[max(0, len(rows)-v.height):], from, to
	}
	from = v.first()
	to = from
	for to < len(v.lines) && len(rows) < v.height {
		rows = append(rows, v.rows(v.lines[to])...)
		to++
	}
	return rows[:min(len(rows), v.height)], from, to
}

// view is the rows in view, in a viewport of v's size.
func (v logView) view() string {
	rows, _, _ := v.shown()
	vp := viewport.New(viewport.WithWidth(v.width), viewport.WithHeight(v.height))
	vp.SetContentLines(rows)
	return vp.View()
}

// where says which lines are in view: "lines 85-100 of 100".
func (v logView) where() string {
	_, from, to := v.shown()
	return fmt.Sprintf("lines %d-%d of %d", from+1, to, len(v.lines))
}

// filtered is the lines that contain f, all when f is empty.
func filtered(lines []string, f string) []string {
	if f == "" {
		return lines
	}
	var out []string
	for _, l := range lines {
		if strings.Contains(l, f) {
			out = append(out, l)
		}
	}
	return out
}
