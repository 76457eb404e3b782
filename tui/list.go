package tui

import (
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// list is a page's rows, after the filter, and its selected row. A refresh
// keeps the selection on the same item (by key) wherever the item moved, so
// an action never lands on a row that slid under the cursor.
type list[T any] struct {
	rows   []T
	cursor int
	at     time.Time // when the rows were read; zero before the first read
}

// show replaces the rows.
func (l *list[T]) show(rows []T, key func(T) string) {
	selected, had := "", l.cursor < len(l.rows)
	if had {
		selected = key(l.rows[l.cursor])
	}
	l.rows = rows
	l.cursor = max(0, min(l.cursor, len(rows)-1))
	for i, r := range rows {
		if had && key(r) == selected {
			l.cursor = i
			break
		}
	}
}

// emptyText says why a list shows no rows: nothing matches the filter
// (named, so the operator sees what to clear), or there is nothing at all
// (ifNone, which may hint how to create some).
func emptyText(things, filter string, total int, ifNone string) string {
	if total > 0 {
		return "no " + things + ` match "` + Clean(filter) + `"`
	}
	return ifNone
}

// readAt is when the rows were read (see page).
func (l list[T]) readAt() time.Time { return l.at }

func (l *list[T]) move(d int) { l.cursor = max(0, min(len(l.rows)-1, l.cursor+d)) }

// selected is the selected row; the zero T (nil for pointers) when empty.
func (l *list[T]) selected() T {
	var none T
	if l.cursor < len(l.rows) {
		return l.rows[l.cursor]
	}
	return none
}

// moveKeys is up and down when there is somewhere to move.
func (l *list[T]) moveKeys(k KeyMap) []key.Binding {
	if len(l.rows) < 2 {
		return nil
	}
	return []key.Binding{k.Up, k.Down}
}

// moveKey moves the cursor if msg is up or down, and says whether it was.
func (l *list[T]) moveKey(msg tea.KeyPressMsg, k KeyMap) bool {
	switch {
	case key.Matches(msg, k.Up):
		l.move(-1)
	case key.Matches(msg, k.Down):
		l.move(1)
	default:
		return false
	}
	return true
}
