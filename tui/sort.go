package tui

import (
	"cmp"
	"slices"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// sortColumn is a column a list can be sorted by: its header and the
// order of two rows by it.
type sortColumn[T any] struct {
	header string
	cmp    func(a, b T) int
}

// sorting is how a list is sorted, k9s-like: by none of its columns (col
// 0, ctrld's order), or by column col-1 of its sortColumns, descending if
// desc. The sort key cycles the column, the reverse key flips the order.
type sorting struct {
	col  int
	desc bool
}

// sortRows sorts rows by s, stably: rows equal in the sort column keep
// ctrld's order, whichever the direction.
func sortRows[T any](rows []T, cols []sortColumn[T], s sorting) {
	if s.col <= 0 || s.col > len(cols) {
		return
	}
	by := cols[s.col-1].cmp
	slices.SortStableFunc(rows, func(a, b T) int {
		if s.desc {
			return by(b, a)
		}
		return by(a, b)
	})
}

// mark is header with ▲ (ascending) or ▼ (descending) when the list is
// sorted by its column.
func mark[T any](header string, cols []sortColumn[T], s sorting) string {
	if s.col <= 0 || s.col > len(cols) || cols[s.col-1].header != header {
		return header
	}
	if s.desc {
		return header + "▼"
	}
	return header + "▲"
}

// key changes s if msg is the sort or the reverse key, among n columns,
// and says whether it was. The sort key moves to the next column, the
// last back to ctrld's order; the reverse key works on a sort column.
func (s *sorting) key(msg tea.KeyPressMsg, k KeyMap, n int) bool {
	switch {
	case key.Matches(msg, k.Sort):
		s.col, s.desc = (s.col+1)%(n+1), false
	case key.Matches(msg, k.Reverse) && s.col > 0:
		s.desc = !s.desc
	default:
		return false
	}
	return true
}

// keys are the sort keys that do something now.
func (s sorting) keys(k KeyMap) []key.Binding {
	if s.col > 0 {
		return []key.Binding{k.Sort, k.Reverse}
	}
	return []key.Binding{k.Sort}
}

// short is the sort keys in one entry, for the one-line help: "o sort",
// and, once sorted, "o/O sort/reverse" (O does nothing before).
func (s sorting) short(k KeyMap) key.Binding {
	b := k.Sort
	if s.col > 0 {
		b.SetKeys("o", "O")
		b.SetHelp("o/O", "sort/reverse")
	} else {
		b.SetHelp("o", "sort")
	}
	return b
}

// byString and byNumber order rows by one of their fields.
func byString[T any](f func(T) string) func(a, b T) int {
	return func(a, b T) int { return cmp.Compare(f(a), f(b)) }
}

func byNumber[T any, N cmp.Ordered](f func(T) N) func(a, b T) int {
	return func(a, b T) int { return cmp.Compare(f(a), f(b)) }
}
