package tui

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"
)

// The live views (pods.go, events.go, logs.go) show a deployment's pods,
// their events and a pod's log in one region as its agent sees them now:
// ctrld asks the region's agent over the connection the agent opened
// (OperatorService.ListPods, ListEvents, StreamLogs), so everything on
// them is the agent's text, shown through Clean and CleanLog only. An
// agent that is gone, silent or refusing is said on the page, in ctrld's
// words; it is not an outage of ctrld, so there is no banner and no
// reconnect, and the reads run in commands, so keys work while they wait.

const (
	// liveTimeout bounds a live read. ctrld answers DeadlineExceeded
	// itself after 10 s when the region's agent says nothing
	// (daemon/liveview.FirstByte), naming the region; the console waits
	// a little longer, so that those words, not its own, are shown.
	liveTimeout = 15 * time.Second
	// liveEvery is how often the pods and events pages read again while
	// shown: each read is a request to the region's agent and a list in
	// its cluster, so not at every tick.
	liveEvery = 2 * time.Second
)

// liveReads paces one live page's reads: one at a time, and the next
// liveEvery after the last ended, whatever the ticks ask. The copies of
// the page (pages are values) share it; nil paces nothing.
type liveReads struct {
	busy atomic.Bool
	last atomic.Int64 // when the last read ended, in Unix nanoseconds
}

// paced is read as a page's read (see page.read), run only when r lets
// it; otherwise it answers nothing, which the root ignores. The read
// returns its error in its message (the page shows it), never to the
// root.
func (r *liveReads) paced(read func(ctx context.Context) tea.Msg) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		if r == nil {
			return read(ctx), nil
		}
		if time.Since(time.Unix(0, r.last.Load())) < liveEvery || !r.busy.CompareAndSwap(false, true) {
			return nil, nil
		}
		defer func() {
			r.last.Store(time.Now().UnixNano())
			r.busy.Store(false)
		}()
		return read(ctx), nil
	}
}

// liveWhere names a deployment in a region on a live page's title.
func liveWhere(id, region string) string { return Clean(id) + " in " + Clean(region) }

// liveFailed is a live read's error on its page: ctrld's words (the
// region's agent not connected, silent, refusing), and, when the page
// still shows an earlier answer, that it is that one.
func liveFailed(pc pageContext, err error, what string, shown bool, at time.Time) string {
	s := pc.styles
	var b strings.Builder
	b.WriteString(s.Bad.Render(indented("  ", ErrorText(err), pc.width, 3)) + "\n")
	if shown {
		b.WriteString(s.Dim.Render(clip("  "+what+" "+asOfText(at, pc.now)+", the last answer:", pc.width)) + "\n")
	}
	return b.String()
}

// window is the rows [from, to) of n that a table of room rows shows
// with the cursor on one of them.
func window(n, cursor, room int) (from, to int) {
	room = max(room, 1)
	from = max(0, cursor-room+1)
	return from, min(n, from+room)
}
