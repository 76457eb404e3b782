package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// podsMsg is a read of a deployment's pods in a region, from its agent;
// err is why there is none (ctrld's words).
type podsMsg struct {
	id, region string // asked for
	pods       []*ctrlv1.LivePod
	err        error
}

// podsPage is a deployment's pods in one region, live from the region's
// agent: each one's phase, readiness, restarts, spec hash, node, age and
// why it is not ready, and the selected one's containers with how their
// last run ended (its termination message: a crash's last words). Read
// again every liveEvery while shown; l or enter opens the selected pod's
// log (asking which container first when it has several), e the pods'
// events.
type podsPage struct {
	id, region string
	// from is the page esc returns to: the rollout, the region it was
	// opened from; nil for home.
	from  page
	reads *liveReads
	all   []*ctrlv1.LivePod
	// err is the last read's error; the rows are the last answer's.
	err                   error
	answered              bool // a read answered with pods
	list[*ctrlv1.LivePod]      // all, filtered
}

// newPodsPage is the pods of deployment id in region, opened from from.
func newPodsPage(id, region string, from page) podsPage {
	return podsPage{id: id, region: region, from: from, reads: &liveReads{}}
}

// parent is the page esc returns to (see openedFrom).
func (p podsPage) parent() page { return p.from }

func (p *podsPage) set(pods []*ctrlv1.LivePod, filter string) {
	p.all = pods
	var rows []*ctrlv1.LivePod
	for _, pod := range pods {
		if strings.Contains(pod.GetName(), filter) || strings.Contains(pod.GetPhase(), filter) || strings.Contains(podWhy(pod), filter) ||
			strings.Contains(pod.GetNode(), filter) {
			rows = append(rows, pod)
		}
	}
	p.show(rows, (*ctrlv1.LivePod).GetName)
}

func (p podsPage) title() string { return "pods of " + liveWhere(p.id, p.region) + "  (esc: back)" }

func (p podsPage) readTimeout() time.Duration { return liveTimeout }

func (p podsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	id, region := p.id, p.region
	return p.reads.paced(func(ctx context.Context) tea.Msg {
		r, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: id, Region: region})
		return podsMsg{id: id, region: region, pods: r.GetPods(), err: err}
	})
}

// receive takes the pods of this page's deployment and region only (see
// detailPage.receive); a failed read keeps the rows of the last answer.
func (p podsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := msg.(podsMsg)
	if !ok || r.id != p.id || r.region != p.region {
		return p, false
	}
	p.err = r.err
	if r.err == nil {
		p.at, p.answered = pc.now, true
		p.set(r.pods, pc.filter)
	} else if p.at.IsZero() {
		p.at = pc.now // answered, if not with pods: the page is not loading
	}
	return p, true
}

func (p podsPage) filter(f string) page {
	p.set(p.all, f)
	return p
}

func (p podsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	k := pc.keys
	if p.moveKey(msg, k) {
		return p, action{}
	}
	switch pod := p.selected(); {
	case key.Matches(msg, k.Events):
		return p, action{open: newEventsPage(p.id, p.region, p)}
	case pod != nil && key.Matches(msg, k.Logs) && len(pod.GetContainers()) > 1:
		return p, action{open: newContainersPage(p.id, p.region, pod, p, p.at)} // which one?
	case pod != nil && key.Matches(msg, k.Logs):
		return p, action{open: newLogsPage(p.id, p.region, pod.GetName(), false, p)}
	}
	return p, action{}
}

func (p podsPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Back}, p.moveKeys(k)
	if p.selected() != nil {
		short, keys = append(short, k.Logs), append(keys, k.Logs)
	}
	return append(short, k.Events), append(keys, k.Events)
}

// podsNote says what the page's pods are and where they come from.
const podsNote = "live from the region's agent"

func (p podsPage) view(pc pageContext) string {
	s := pc.styles
	var b strings.Builder
	switch {
	case p.at.IsZero():
		return s.Dim.Render(clip("  asking "+Clean(p.region)+"'s agent for the pods of "+Clean(p.id)+" ...", pc.width)) + "\n"
	case p.err != nil:
		b.WriteString(liveFailed(pc, p.err, "the pods", p.answered, p.at))
		if !p.answered {
			return b.String()
		}
		pc.stale = true // the rows are the last answer's
	default:
		b.WriteString(s.Dim.Render(clip(fmt.Sprintf("  %d pods, %s", len(p.all), podsNote), pc.width)) + "\n")
	}
	b.WriteString("\n")
	cols := []column{{header: ""}, {header: "POD"}, {header: "PHASE"}, {header: "READY"}, {header: "RESTARTS", numeric: true},
		{header: "SPEC"}, {header: "NODE"}, {header: "AGE"}, {header: "WHY", elide: true}}
	// The table gives the selected pod's containers the room they need.
	from, to := window(len(p.rows), p.cursor, pc.height-6-3*len(p.selected().GetContainers()))
	cells := make([][]string, 0, to-from)
	for _, pod := range p.rows[from:to] {
		cells = append(cells, []string{pc.marker(), clip(pod.GetName(), 40), clip(pod.GetPhase(), 10), podReady(pod), fmt.Sprint(pod.GetRestarts()),
			clip(orDash(pod.GetSpecHash()), 16), clip(orDash(pod.GetNode()), 20), podAge(pod, pc.asOf), Clean(orDash(podWhy(pod)))})
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("pods", pc.filter, len(p.all), "no pods: the agent sees none of this deployment's")) + "\n")
	}
	for i, l := range lines[1:] {
		style := s.Plain
		if pod := p.rows[from+i]; !pod.GetReady() {
			style = s.Warn
		}
		b.WriteString(pc.rowStyle(l, from+i == p.cursor, style) + "\n")
	}
	if more := len(p.rows) - to; more > 0 {
		b.WriteString(s.Dim.Render(fmt.Sprintf("  ... %d more (↓)", more)) + "\n")
	}
	if pod := p.selected(); pod != nil {
		b.WriteString(containersView(pc, pod))
	}
	return b.String()
}

// containersView is the selected pod's containers: each one's state and
// how its last run ended, with its termination message.
func containersView(pc pageContext, pod *ctrlv1.LivePod) string {
	s := pc.styles
	var b strings.Builder
	b.WriteString("\n")
	for _, c := range pod.GetContainers() {
		ready := "ready"
		if !c.GetReady() {
			ready = "not ready"
		}
		state := strings.TrimSpace(Clean(c.GetState()) + " " + Clean(c.GetReason()))
		line := fmt.Sprintf("  container %s: %s, %s, restarts %d", Clean(c.GetName()), ready, orDash(state), c.GetRestarts())
		if c.GetLastExit() != "" {
			line += ", last run ended " + Clean(c.GetLastExit())
		}
		style := s.Plain
		if !c.GetReady() {
			style = s.Warn
		}
		b.WriteString(pc.rowStyle(elide(line, pc.width), false, style) + "\n")
		if m := c.GetTerminationMessage(); m != "" {
			b.WriteString(pc.rowStyle(indented("    termination message: ", m, pc.width, 4), false, s.Bad) + "\n")
		}
	}
	return b.String()
}

// podWhy is why a pod is not ready, with its containers' termination
// messages (a crash's last words, as the CLI shows them): `CrashLoopBackOff (app: "panic: …")`.
func podWhy(pod *ctrlv1.LivePod) string {
	why := pod.GetWhy()
	for _, c := range pod.GetContainers() {
		if m := c.GetTerminationMessage(); m != "" {
			why += fmt.Sprintf(" (%s: %q)", c.GetName(), m)
		}
	}
	return strings.TrimSpace(why)
}

// podReady is a pod's ready containers of all: 1/2; its readiness when it
// lists none.
func podReady(pod *ctrlv1.LivePod) string {
	cs := pod.GetContainers()
	if len(cs) == 0 {
		if pod.GetReady() {
			return "ready"
		}
		return "not ready"
	}
	n := 0
	for _, c := range cs {
		if c.GetReady() {
			n++
		}
	}
	return fmt.Sprintf("%d/%d", n, len(cs))
}

// podAge is how long ago a pod was created, to now.
func podAge(pod *ctrlv1.LivePod, now time.Time) string {
	if pod.GetCreatedAt() == nil {
		return "-"
	}
	return span(now.Sub(pod.GetCreatedAt().AsTime()))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
