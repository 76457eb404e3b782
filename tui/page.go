package tui

import (
	"context"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// page is one screen of the console (regions, a region, deployments, a
// deployment's history): it owns its rows, its cursor, its keys, its view
// and its help. The root Model reads for it, routes keys and read answers
// to it and draws the frame around its view; a page never reaches into the
// root: what it wants done comes back as an action.
type page interface {
	// title names the page on the frame's first line.
	title() string
	// read is the call that loads what the page shows; its answer comes
	// back through receive.
	read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error)
	// receive takes a read's answer; ok is false when it is not for this
	// page (another page's, or asked for before the operator moved on).
	receive(msg tea.Msg, pc pageContext) (p page, ok bool)
	// filter shows only the rows that contain f.
	filter(f string) page
	// readAt is when the rows shown were read; zero before the first read.
	readAt() time.Time
	// update handles a key the root left to the page.
	update(msg tea.KeyPressMsg, pc pageContext) (page, action)
	// view is the page's body; the root draws title, banner, status and
	// help around it.
	view(pc pageContext) string
	// help is the keys update handles now (none that would do nothing:
	// no row action without a row), and the few of them the one-line help
	// shows, which may name the root's esc and tab; the root adds its own
	// keys to both.
	help(k KeyMap) (short, keys []key.Binding)
}

// child is a page opened from an opened page (a rollback's diff from a
// deployment's history): esc returns to the page it was opened from,
// not home.
type child interface {
	parent() page
}

// openedFrom is the page esc on p returns to: its parent, or nil (the
// home page).
func openedFrom(p page) page {
	if c, ok := p.(child); ok {
		return c.parent()
	}
	return nil
}

// action is what a page asks of the root after a key; the zero action
// asks nothing.
type action struct {
	confirm *confirmation // ask the operator, and run it on yes
	status  string        // say it on the status line
	open    page          // show it, opened from this page (esc returns)
	read    bool          // read the page now (it changed what it shows)
}

// slowReader is a page whose read may take longer than the root's bound
// on a read: a live view, which ctrld asks of the region's agent.
type slowReader interface {
	readTimeout() time.Duration
}

// leaver is a page that runs something while shown (a log's follow),
// which leave ends when another page takes the screen or the console
// quits.
type leaver interface {
	leave()
}

// continuedMsg is a read's answer that comes in pieces (a log): while
// a page takes them, continued reads the next; a piece no page took
// is abandoned, which ends the reading.
type continuedMsg interface {
	continued() tea.Cmd
	abandoned()
}

// pageContext is what a page reads from the root, sized and timed by it.
type pageContext struct {
	styles Styles
	keys   KeyMap
	// op is the client confirmations run their calls on.
	op ctrlv1.OperatorServiceClient
	// now is the clock's time; asOf is the time ages are counted to: now
	// while ctrld answers, the last good read while it does not, so that
	// "3m ago" does not keep counting as if it had just been read.
	now, asOf time.Time
	width     int
	// height is the lines the page's view may fill (the screen's, less
	// the frame's).
	height int
	// stale is true while ctrld does not answer and the rows are the last
	// it sent.
	stale bool
	// filter is the text every list is narrowed to.
	filter string
	// overviews are the regions' health as last read, for the warnings of
	// confirmations; the first that names a region is used.
	overviews []*ctrlv1.RegionOverview
}

// rowStyle marks a table row: dimmed, with "?", while the data is stale,
// so that no row reads as live when ctrld does not answer.
func (pc pageContext) rowStyle(line string, selected bool, style lipgloss.Style) string {
	switch {
	case selected:
		return pc.styles.Selected.Render(line)
	case pc.stale:
		return pc.styles.Dim.Render(line)
	}
	return style.Render(line)
}

// marker starts a row: "?" while the data is stale (see rowStyle).
func (pc pageContext) marker() string {
	if pc.stale {
		return "?"
	}
	return " "
}

// noteLine is the line under a resource's row that says why it is not in
// sync (see syncNote, applyFailing); nothing when note is empty.
func (pc pageContext) noteLine(note string) string {
	if note == "" {
		return ""
	}
	style := pc.styles.Warn
	if pc.stale {
		style = pc.styles.Dim
	}
	return style.Render(elide(pc.marker()+"   ↳ "+note, pc.width)) + "\n"
}
