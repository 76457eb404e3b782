package tui

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// pendingShown is how many pending changes the region page lists (and
// fetches); it counts all of them.
const pendingShown = 5

// detailMsg is a read of one region and its pending changes.
type detailMsg struct {
	name    string // the region asked for
	region  *ctrlv1.GetRegionResponse
	pending *ctrlv1.ListPendingChangesResponse
}

// detailPage shows one region: its pending changes and its resources,
// desired vs actual.
type detailPage struct {
	name                             string
	region                           *ctrlv1.GetRegionResponse
	pending                          *ctrlv1.ListPendingChangesResponse
	list[*ctrlv1.DeploymentInRegion] // the region's deployments, filtered
}

func (p *detailPage) set(r *ctrlv1.GetRegionResponse, pending *ctrlv1.ListPendingChangesResponse, filter string) {
	p.region, p.pending = r, pending
	var rows []*ctrlv1.DeploymentInRegion
	for _, d := range r.GetDeployments() {
		if strings.Contains(d.GetDeploymentId(), filter) {
			rows = append(rows, d)
		}
	}
	p.show(rows, (*ctrlv1.DeploymentInRegion).GetDeploymentId)
}

func (p detailPage) title() string { return "region " + Clean(p.name) + "  (esc: back)" }

func (p detailPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: p.name})
		if err != nil {
			return nil, err
		}
		pending, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: p.name, Limit: pendingShown})
		return detailMsg{p.name, r, pending}, err
	}
}

// receive takes a read of this page's region only: another's, asked for
// before the operator moved on, would show its rows (and act on them)
// under this one's name.
func (p detailPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	d, ok := msg.(detailMsg)
	if !ok || d.name != p.name {
		return p, false
	}
	p.at = pc.now
	p.set(d.region, d.pending, pc.filter)
	return p, true
}

func (p detailPage) filter(f string) page {
	if p.region != nil {
		p.set(p.region, p.pending, f)
	}
	return p
}

func (p detailPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	if p.moveKey(msg, pc.keys) {
		return p, action{}
	}
	if p.region != nil {
		// Its confirmations warn from the region's health as read with it.
		pc.overviews = append([]*ctrlv1.RegionOverview{p.region.GetOverview()}, pc.overviews...)
	}
	k, d := pc.keys, p.selected()
	var ask *confirmation
	switch {
	case key.Matches(msg, k.Resync):
		ask = pc.resyncConfirmation(p.name)
	case key.Matches(msg, k.Pause) && p.region != nil:
		ask = pc.pauseConfirmation(p.name, !p.region.GetOverview().GetPaused())
	case key.Matches(msg, k.Stop) && d != nil:
		ask = pc.statusConfirmation(d, p.name, ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED)
	case key.Matches(msg, k.Start) && d != nil:
		ask = pc.statusConfirmation(d, p.name, ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING)
	case key.Matches(msg, k.ScaleUp) && d != nil:
		ask = pc.scaleConfirmation(d, p.name, d.GetReplicas()+1)
	case key.Matches(msg, k.ScaleDown) && d != nil && d.GetReplicas() > 0:
		ask = pc.scaleConfirmation(d, p.name, d.GetReplicas()-1)
	case key.Matches(msg, k.YAML) && d != nil:
		return p, action{open: yamlPage{id: d.GetDeploymentId(), region: p.name, from: p}}
	case key.Matches(msg, k.Pods) && d != nil:
		return p, action{open: newPodsPage(d.GetDeploymentId(), p.name, p)}
	case key.Matches(msg, k.Halt) && p.region != nil:
		// The rollouts here are not read with the region: no count.
		ask = pc.haltConfirmation([]haltScope{{"region " + Clean(p.name), &ctrlv1.FleetScope{Region: p.name}}}, nil)
		ask.form.chosen = 1 // this region, first
	case key.Matches(msg, k.Diff) && len(p.pending.GetChanges()) > 0:
		diff := pendingDiffPage{region: p}
		diff.set(pc.filter)
		return p, action{open: diff}
	}
	return p, action{confirm: ask}
}

func (p detailPage) help(k KeyMap) (short, keys []key.Binding) {
	keys = append(p.moveKeys(k), k.Resync)
	if p.region != nil {
		keys = append(keys, k.Pause)
		if k.Halt.Enabled() {
			keys = append(keys, k.Halt)
		}
	}
	short = []key.Binding{k.Back, k.Switch}
	if p.selected() != nil {
		keys = append(keys, k.Stop, k.Start, k.ScaleUp, k.YAML, k.Pods)
		short = append(short, k.Pods)
	}
	if len(p.pending.GetChanges()) > 0 {
		short = append(short, p.diff(k))
		keys = append(keys, p.diff(k))
	}
	return short, keys
}

// diff is Diff with this page's words.
func (detailPage) diff(k KeyMap) key.Binding {
	b := k.Diff
	b.SetHelp("d", "diff pending")
	return b
}

// whyShown caps the region page's list of reasons; the regions page
// shows them all for the selected region.
const whyShown = 4

func (p detailPage) view(pc pageContext) string {
	s := pc.styles
	var b strings.Builder
	if p.region == nil {
		return s.Dim.Render("  loading " + Clean(p.name) + " ...\n")
	}
	o := p.region.GetOverview()
	now := pc.asOf
	// The state first and whole, whatever the width: it is what the
	// operator came for; the numbers after it give way.
	state, style := pc.regionState(o)
	head := "  state " + state
	rest := fmt.Sprintf("  head %d  acked %d  lag %d changes / %.1fs  agent %s",
		o.GetHeadVersion(), o.GetAckedVersion(), o.GetLagChanges(), o.GetLagSeconds(), orNone(Clean(o.GetAgentIdentity())))
	if room := pc.width - ansi.StringWidth(head); room > 1 {
		rest = clip(rest, room)
	} else {
		rest = ""
	}
	b.WriteString(pc.rowStyle(head, false, style) + rest + "\n")
	why := whyNotInSync(o, now)
	for i, w := range why {
		if i == whyShown {
			b.WriteString(s.Dim.Render(fmt.Sprintf("  ... %d more (the regions page lists them all)", len(why)-i)) + "\n")
			break
		}
		prefix := "  why: "
		if i > 0 {
			prefix = "       "
		}
		b.WriteString(s.Warn.Render(elide(prefix+w, pc.width)) + "\n")
	}
	b.WriteString("\n")
	if !o.GetAgentConnected() && o.GetLastHeartbeat() != nil {
		// The agent reports READY and ACTUAL; while it is down they are
		// what it saw last.
		b.WriteString(s.Warn.Render(clip("  READY and ACTUAL "+asOfText(o.GetLastHeartbeat().AsTime(), now)+", the agent's last report", pc.width)) + "\n")
	}

	cols := []column{{header: ""}, {header: "DEPLOYMENT"}, {header: "DESIRED"}, {header: "REPLICAS", numeric: true}, {header: "READY", numeric: true},
		{header: "ACTUAL"}, {header: "WORKFLOW"}}
	cells := make([][]string, len(p.rows))
	for i, dep := range p.rows {
		cells[i] = []string{pc.marker(), clip(dep.DeploymentId, 20), clip(dep.DesiredStatus, 9), fmt.Sprint(dep.Replicas),
			fmt.Sprintf("%d/%d", dep.ReadyInstances, dep.Instances), clip(dep.ActualStatus, 11), workflowShown(dep, dep.WorkflowStatus)}
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", pc.filter, len(p.region.GetDeployments()), "no deployments in this region")) + "\n")
	}
	for i, dep := range p.rows {
		b.WriteString(pc.rowStyle(lines[i+1], i == p.cursor, s.Plain) + "\n")
		b.WriteString(pc.noteLine(syncNote(dep, now)))
	}
	for _, sen := range p.region.GetSentinels() {
		b.WriteString(clip(fmt.Sprintf("  sentinel %-14s %-8s %d/%d available  %s", clip(sen.SentinelId, 14), Clean(sen.DesiredState),
			sen.AvailableReplicas, sen.Replicas, Clean(sen.Health)), pc.width) + "\n")
		b.WriteString(pc.noteLine(applyFailing(sen.GetSync(), now)))
	}
	for _, policy := range p.region.GetPolicies() {
		owner := "environment " + Clean(policy.EnvironmentId)
		if policy.DeploymentId != "" {
			owner = "deployment " + Clean(policy.DeploymentId)
		}
		b.WriteString(clip(fmt.Sprintf("  policy   %-14s (%s)", clip(policy.Name, 14), owner), pc.width) + "\n")
		b.WriteString(pc.noteLine(applyFailing(policy.GetSync(), now)))
	}

	total := p.pending.GetTotal()
	b.WriteString("\n" + s.Header.Render(clip(fmt.Sprintf("  PENDING CHANGES (%d): version, age, by, resource, change", total), pc.width)) + "\n")
	changes := p.pending.GetChanges() // the oldest pendingShown
	for _, line := range pc.pendingLines(changes, now) {
		b.WriteString(pc.rowStyle(line, false, s.Plain) + "\n")
	}
	if more := total - int64(len(changes)); more > 0 {
		fmt.Fprintf(&b, s.Dim.Render("  ... %d more")+"\n", more)
	}
	return b.String()
}

// pendingLines are the pending changes, one line each: its version, age,
// who made it and what it changes (where the server says; older servers
// do not), the part that gets the rest of the line. The section's title
// names the columns.
func (pc pageContext) pendingLines(changes []*ctrlv1.PendingChange, now time.Time) []string {
	cols := []column{{header: ""}, {header: "", numeric: true, min: 8}, {header: "", min: 7}, {header: "", min: 8}, {header: "", min: 20}, {header: "", elide: true}}
	cells := make([][]string, len(changes))
	for i, c := range changes {
		kind := pendingKind(c)
		actor := c.GetActor()
		if actor == "" {
			actor = "-"
		}
		cells[i] = []string{pc.marker(), fmt.Sprint(c.GetVersion()), ago(now, c.GetCreatedAt().AsTime()), clip(actor, 8),
			clip(kind+"/"+c.GetResourceId(), 20), Clean(c.GetSummary())}
	}
	return tableLines(cols, cells, pc.width)[1:]
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// pendingKind is the kind of a pending change's resource, short:
// deployment, sentinel or policy.
func pendingKind(c *ctrlv1.PendingChange) string {
	// Servers before PendingChange.kind send only the change row's type.
	kind := cmp.Or(c.GetKind(), strings.TrimSuffix(c.GetResourceType(), "_topology"))
	return strings.TrimPrefix(kind, "cilium_network_")
}
