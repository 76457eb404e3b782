package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// eventsMsg is a read of the events of a deployment's objects in a
// region, from its agent; err is why there are none (ctrld's words).
type eventsMsg struct {
	id, region string // asked for
	events     []*ctrlv1.LiveEvent
	err        error
}

// eventsPage is the recent Kubernetes events of a deployment's objects in
// one region, live from the region's agent, newest first: when each was
// last seen, its type, reason, object, count and message, and the
// selected one's message whole. Read again every liveEvery while shown.
type eventsPage struct {
	id, region string
	from       page // the pods page it was opened from; nil for home
	reads      *liveReads
	all        []*ctrlv1.LiveEvent // newest first
	err        error
	answered   bool
	list[*ctrlv1.LiveEvent]
}

// newEventsPage is the events of deployment id in region, opened from
// from.
func newEventsPage(id, region string, from page) eventsPage {
	return eventsPage{id: id, region: region, from: from, reads: &liveReads{}}
}

// parent is the page esc returns to (see openedFrom).
func (p eventsPage) parent() page { return p.from }

func (p *eventsPage) set(events []*ctrlv1.LiveEvent, filter string) {
	p.all = events
	var rows []*ctrlv1.LiveEvent
	for _, e := range events {
		if strings.Contains(e.GetType(), filter) || strings.Contains(e.GetReason(), filter) || strings.Contains(e.GetObject(), filter) ||
			strings.Contains(e.GetMessage(), filter) {
			rows = append(rows, e)
		}
	}
	p.show(rows, func(e *ctrlv1.LiveEvent) string { return e.GetObject() + "/" + e.GetReason() + "/" + e.GetMessage() })
}

func (p eventsPage) title() string { return "events of " + liveWhere(p.id, p.region) + "  (esc: back)" }

func (p eventsPage) readTimeout() time.Duration { return liveTimeout }

func (p eventsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	id, region := p.id, p.region
	return p.reads.paced(func(ctx context.Context) tea.Msg {
		r, err := op.ListEvents(ctx, &ctrlv1.ListEventsRequest{DeploymentId: id, Region: region})
		return eventsMsg{id: id, region: region, events: r.GetEvents(), err: err}
	})
}

// receive takes the events of this page's deployment and region only;
// a failed read keeps the rows of the last answer.
func (p eventsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := msg.(eventsMsg)
	if !ok || r.id != p.id || r.region != p.region {
		return p, false
	}
	p.err = r.err
	if r.err == nil {
		p.at, p.answered = pc.now, true
		newest := slices.Clone(r.events) // ctrld's are newest last
		slices.Reverse(newest)
		p.set(newest, pc.filter)
	} else if p.at.IsZero() {
		p.at = pc.now
	}
	return p, true
}

func (p eventsPage) filter(f string) page {
	p.set(p.all, f)
	return p
}

func (p eventsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	p.moveKey(msg, pc.keys)
	return p, action{}
}

func (p eventsPage) help(k KeyMap) (short, keys []key.Binding) {
	return []key.Binding{k.Back}, p.moveKeys(k)
}

func (p eventsPage) view(pc pageContext) string {
	s := pc.styles
	var b strings.Builder
	switch {
	case p.at.IsZero():
		return s.Dim.Render(clip("  asking "+Clean(p.region)+"'s agent for the events of "+Clean(p.id)+" ...", pc.width)) + "\n"
	case p.err != nil:
		b.WriteString(liveFailed(pc, p.err, "the events", p.answered, p.at))
		if !p.answered {
			return b.String()
		}
		pc.stale = true
	default:
		b.WriteString(s.Dim.Render(clip(fmt.Sprintf("  %d events, newest first, %s", len(p.all), podsNote), pc.width)) + "\n")
	}
	b.WriteString("\n")
	cols := []column{{header: ""}, {header: "LAST SEEN"}, {header: "TYPE"}, {header: "REASON"}, {header: "OBJECT"}, {header: "COUNT", numeric: true},
		{header: "MESSAGE", elide: true}}
	from, to := window(len(p.rows), p.cursor, pc.height-9)
	cells := make([][]string, 0, to-from)
	for _, e := range p.rows[from:to] {
		seen := "-"
		if e.GetLastSeen() != nil {
			seen = ago(pc.asOf, e.GetLastSeen().AsTime())
		}
		cells = append(cells, []string{pc.marker(), seen, clip(e.GetType(), 8), clip(e.GetReason(), 24), clip(e.GetObject(), 40),
			fmt.Sprint(e.GetCount()), Clean(e.GetMessage())})
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("events", pc.filter, len(p.all), "no recent events")) + "\n")
	}
	for i, l := range lines[1:] {
		style := s.Plain
		if p.rows[from+i].GetType() == "Warning" {
			style = s.Warn
		}
		b.WriteString(pc.rowStyle(l, from+i == p.cursor, style) + "\n")
	}
	if more := len(p.rows) - to; more > 0 {
		b.WriteString(s.Dim.Render(fmt.Sprintf("  ... %d older (↓)", more)) + "\n")
	}
	if e := p.selected(); e != nil {
		b.WriteString("\n" + pc.rowStyle(indented("  message: ", e.GetMessage(), pc.width, 4), false, s.Plain) + "\n")
	}
	return b.String()
}
