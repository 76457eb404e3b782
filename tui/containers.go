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

// containersPage asks which container's log to open, for a pod of several
// containers (l on the pods page): the pod's containers as the pods page
// last read them, the crashed ones first (crashed), each with its state
// and how its last run ended. l or enter opens the selected container's
// log as l opens a pod's of one container (the current run; p there is
// the run that crashed); esc returns to the pods, and so does esc on the
// log. It reads nothing itself.
type containersPage struct {
	id, region, pod string
	from            podsPage // the pods page it was opened from
	all             []*ctrlv1.LiveContainer
	list[*ctrlv1.LiveContainer]
}

// newContainersPage is the picker of pod's containers, opened from the
// pods page from, which read them at at.
func newContainersPage(id, region string, pod *ctrlv1.LivePod, from podsPage, at time.Time) containersPage {
	all := slices.Clone(pod.GetContainers())
	slices.SortStableFunc(all, func(a, b *ctrlv1.LiveContainer) int {
		switch ca, cb := crashed(a), crashed(b); {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	p := containersPage{id: id, region: region, pod: pod.GetName(), from: from, all: all}
	p.at = at
	p.set("")
	return p
}

// crashed reports whether a container's last run ended badly and it is
// not running well now: it restarted, or it waits or stopped with a
// reason, and it is not ready. A crash-looping container is; a sidecar
// that restarted once and runs ready is not.
func crashed(c *ctrlv1.LiveContainer) bool {
	return !c.GetReady() && (c.GetRestarts() > 0 || c.GetLastExit() != "" || c.GetReason() != "")
}

func (p *containersPage) set(filter string) {
	var rows []*ctrlv1.LiveContainer
	for _, c := range p.all {
		if strings.Contains(c.GetName(), filter) || strings.Contains(c.GetState(), filter) || strings.Contains(c.GetReason(), filter) {
			rows = append(rows, c)
		}
	}
	p.show(rows, (*ctrlv1.LiveContainer).GetName)
}

// parent is the page esc returns to (see openedFrom).
func (p containersPage) parent() page { return p.from }

func (p containersPage) title() string {
	return "log of " + Clean(p.pod) + " (" + liveWhere(p.id, p.region) + "): which container?  (esc: back)"
}

// read reads nothing: the containers are the pods page's last answer.
func (p containersPage) read(ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(context.Context) (tea.Msg, error) { return nil, nil }
}

func (p containersPage) receive(tea.Msg, pageContext) (page, bool) { return p, false }

func (p containersPage) filter(f string) page {
	p.set(f)
	return p
}

func (p containersPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	k := pc.keys
	if p.moveKey(msg, k) {
		return p, action{}
	}
	if c := p.selected(); c != nil && key.Matches(msg, k.Logs) {
		return p, action{open: newLogsPage(p.id, p.region, p.pod, false, p.from).ofContainer(c.GetName())}
	}
	return p, action{}
}

func (p containersPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Back}, p.moveKeys(k)
	if p.selected() != nil {
		open := k.Logs
		open.SetHelp("l/enter", "its log")
		short, keys = append(short, open), append(keys, open)
	}
	return short, keys
}

func (p containersPage) view(pc pageContext) string {
	s := pc.styles
	var b strings.Builder
	b.WriteString(s.Dim.Render(clip(fmt.Sprintf("  %d containers, the crashed first, as the pods page read them", len(p.all)), pc.width)) + "\n\n")
	cols := []column{{header: ""}, {header: "CONTAINER"}, {header: "READY"}, {header: "STATE"}, {header: "RESTARTS", numeric: true},
		{header: "LAST RUN ENDED", elide: true}}
	from, to := window(len(p.rows), p.cursor, pc.height-4)
	cells := make([][]string, 0, to-from)
	for _, c := range p.rows[from:to] {
		ready := "ready"
		if !c.GetReady() {
			ready = "not ready"
		}
		cells = append(cells, []string{pc.marker(), clip(c.GetName(), 40), ready, Clean(orDash(strings.TrimSpace(c.GetState() + " " + c.GetReason()))),
			fmt.Sprint(c.GetRestarts()), Clean(orDash(c.GetLastExit()))})
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("containers", pc.filter, len(p.all), "no containers")) + "\n")
	}
	for i, l := range lines[1:] {
		style := s.Plain
		if crashed(p.rows[from+i]) {
			style = s.Warn
		}
		b.WriteString(pc.rowStyle(l, from+i == p.cursor, style) + "\n")
	}
	if c := p.selected(); c != nil && c.GetTerminationMessage() != "" {
		b.WriteString("\n" + s.Bad.Render(indented("  termination message: ", c.GetTerminationMessage(), pc.width, 4)) + "\n")
	}
	return b.String()
}
