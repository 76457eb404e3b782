package tui

import (
	"strings"

	"charm.land/lipgloss/v2"
	"charm.land/lipgloss/v2/table"
	"github.com/charmbracelet/x/ansi"
)

// column is one column of a table: its header, whether its cells are
// numbers (right-aligned, so that their digits line up), and its least
// width, for cells whose width changes from one refresh to the next ("up
// 9m", "up 10m"), so that the columns after it stand still.
type column struct {
	header  string
	numeric bool
	min     int
	// elide, on the last column, fits its cells in the room the columns
	// before it leave by cutting out their middle (see elide): server
	// text (a summary, an error) keeps its start and its end.
	elide bool
}

// tableLines lays out a table with lipgloss/table, borderless, one space
// between columns, and returns its lines: the header's, then one per row.
// Cells are cleaned by the caller (see Clean, clip); each line is cut to
// width, "…" last. Styling is left to the caller, which styles whole lines
// (the selection's highlight runs across the column gaps).
func tableLines(cols []column, rows [][]string, width int) []string {
	if last := len(cols) - 1; last >= 0 && cols[last].elide && len(rows) > 0 {
		// Lay the table out without the last column's cells to learn
		// where that column starts, then fit them in the rest.
		// (A one-cell mark in it ends the first row's line there, header
		// or not.)
		marked := make([][]string, len(rows))
		for i, r := range rows {
			marked[i] = append(append([]string(nil), r[:last]...), "x")
		}
		room := width - (ansi.StringWidth(layout(cols, marked)[1]) - 1)
		fitted := make([][]string, len(rows))
		for i, r := range rows {
			fitted[i] = append(append([]string(nil), r[:last]...), elide(r[last], room))
		}
		rows = fitted
	}
	lines := layout(cols, rows)
	for i, l := range lines {
		if ansi.StringWidth(l) > width {
			l = ansi.Truncate(l, max(width, 1), "…")
		}
		lines[i] = l
	}
	return lines
}

// layout lays the table out at its natural width: the header's line, then
// one per row, trailing spaces trimmed.
func layout(cols []column, rows [][]string) []string {
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
		if pad := c.min - ansi.StringWidth(c.header); pad > 0 {
			headers[i] += strings.Repeat(" ", pad)
		}
	}
	t := table.New().
		Border(lipgloss.HiddenBorder()).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderHeader(false).BorderColumn(false).BorderRow(false).
		Wrap(false).
		Headers(headers...).
		Rows(rows...).
		StyleFunc(func(_, col int) lipgloss.Style {
			st := lipgloss.NewStyle()
			if col < len(cols)-1 {
				st = st.PaddingRight(1)
			}
			if cols[col].numeric {
				st = st.Align(lipgloss.Right)
			}
			return st
		})
	lines := strings.Split(t.Render(), "\n")[:1+len(rows)]
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}
