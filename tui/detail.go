package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// pendingShown is how many pending changes the region page lists (and
// fetches); it counts all of them.
const pendingShown = 5

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

// whyShown caps the region page's list of reasons; the regions page
// shows them all for the selected region.
const whyShown = 4

func (m Model) renderDetail() string {
	s := m.styles
	d := m.detail
	var b strings.Builder
	if d.region == nil {
		return s.Dim.Render("  loading " + d.name + " ...\n")
	}
	o := d.region.GetOverview()
	now := m.asOf()
	// The state first and whole, whatever the width: it is what the
	// operator came for; the numbers after it give way.
	state, style := m.regionState(o)
	head := "  state " + state
	rest := fmt.Sprintf("  head %d  acked %d  lag %d changes / %.1fs  agent %s",
		o.GetHeadVersion(), o.GetAckedVersion(), o.GetLagChanges(), o.GetLagSeconds(), orNone(Clean(o.GetAgentIdentity())))
	if room := m.width - ansi.StringWidth(head); room > 1 {
		rest = clip(rest, room)
	} else {
		rest = ""
	}
	b.WriteString(m.rowStyle(head, false, style) + rest + "\n")
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
		b.WriteString(s.Warn.Render(elide(prefix+w, m.width)) + "\n")
	}
	b.WriteString("\n")
	if !o.GetAgentConnected() && o.GetLastHeartbeat() != nil {
		// The agent reports READY and ACTUAL; while it is down they are
		// what it saw last.
		b.WriteString(s.Warn.Render(clip("  READY and ACTUAL "+asOfText(o.GetLastHeartbeat().AsTime(), now)+", the agent's last report", m.width)) + "\n")
	}

	b.WriteString(s.Header.Render(fmt.Sprintf("  %-20s %-9s %8s %9s %-11s %-9s", "DEPLOYMENT", "DESIRED", "REPLICAS", "READY", "ACTUAL", "WORKFLOW")) + "\n")
	if len(d.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", m.filter, len(d.region.GetDeployments()), "no deployments in this region")) + "\n")
	}
	for i, dep := range d.rows {
		line := fmt.Sprintf("%s %-20s %-9s %8d %4d/%-4d %-11s %-9s", m.marker(), clip(dep.DeploymentId, 20), Clean(dep.DesiredStatus), dep.Replicas,
			dep.ReadyInstances, dep.Instances, Clean(dep.ActualStatus), workflowShown(dep, dep.WorkflowStatus))
		b.WriteString(m.rowStyle(clip(line, m.width), i == d.cursor, s.Plain) + "\n")
		b.WriteString(m.noteLine(syncNote(dep, now)))
	}
	for _, sen := range d.region.GetSentinels() {
		fmt.Fprintf(&b, "  sentinel %-14s %-8s %d/%d available  %s\n", clip(sen.SentinelId, 14), Clean(sen.DesiredState),
			sen.AvailableReplicas, sen.Replicas, Clean(sen.Health))
		b.WriteString(m.noteLine(applyFailing(sen.GetSync(), now)))
	}
	for _, p := range d.region.GetPolicies() {
		owner := "environment " + Clean(p.EnvironmentId)
		if p.DeploymentId != "" {
			owner = "deployment " + Clean(p.DeploymentId)
		}
		fmt.Fprintf(&b, "  policy   %-14s (%s)\n", clip(p.Name, 14), owner)
		b.WriteString(m.noteLine(applyFailing(p.GetSync(), now)))
	}

	total := d.pending.GetTotal()
	b.WriteString("\n" + s.Header.Render(fmt.Sprintf("  PENDING CHANGES (%d): version, age, by, resource, change", total)) + "\n")
	changes := d.pending.GetChanges() // the oldest pendingShown
	for _, c := range changes {
		b.WriteString(m.rowStyle(m.pendingLine(c, now), false, s.Plain) + "\n")
	}
	if more := total - int64(len(changes)); more > 0 {
		fmt.Fprintf(&b, s.Dim.Render("  ... %d more")+"\n", more)
	}
	return b.String()
}

// pendingLine is one pending change: its age, who made it and what it
// changes (where the server says; older servers do not), the part that
// gets the rest of the line.
func (m Model) pendingLine(c *ctrlv1.PendingChange, now time.Time) string {
	kind := strings.TrimSuffix(strings.TrimPrefix(c.GetResourceType(), "cilium_network_"), "_topology")
	actor := c.GetActor()
	if actor == "" {
		actor = "-"
	}
	line := fmt.Sprintf("%s %8d %-7s %-8s %-20s ", m.marker(), c.GetVersion(), ago(now, c.GetCreatedAt().AsTime()),
		clip(actor, 8), clip(kind+"/"+c.GetResourceId(), 20))
	return strings.TrimRight(line+elide(c.GetSummary(), m.width-ansi.StringWidth(line)), " ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
