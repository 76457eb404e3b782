package tui

import (
	"fmt"
	"strings"

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

func (m Model) renderDetail() string {
	s := m.styles
	d := m.detail
	var b strings.Builder
	if d.region == nil {
		return s.Dim.Render("  loading " + d.name + " ...\n")
	}
	o := d.region.GetOverview()
	state := "ok"
	if p := problems(o); len(p) > 0 {
		state = strings.Join(p, ",")
	}
	fmt.Fprintf(&b, "  head %d  acked %d  lag %d changes / %.1fs  agent %s  state %s\n\n",
		o.GetHeadVersion(), o.GetAckedVersion(), o.GetLagChanges(), o.GetLagSeconds(), orNone(Clean(o.GetAgentIdentity())), state)

	b.WriteString(s.Header.Render(fmt.Sprintf("  %-20s %-9s %8s %9s %-11s %-9s", "DEPLOYMENT", "DESIRED", "REPLICAS", "READY", "ACTUAL", "WORKFLOW")) + "\n")
	if len(d.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", m.filter, len(d.region.GetDeployments()), "no deployments in this region")) + "\n")
	}
	for i, dep := range d.rows {
		line := fmt.Sprintf("  %-20s %-9s %8d %4d/%-4d %-11s %-9s", clip(dep.DeploymentId, 20), Clean(dep.DesiredStatus), dep.Replicas,
			dep.ReadyInstances, dep.Instances, Clean(dep.ActualStatus), Clean(dep.WorkflowStatus))
		line = clip(line, m.width)
		if i == d.cursor {
			line = s.Selected.Render(line)
		}
		b.WriteString(line + "\n")
	}
	for _, sen := range d.region.GetSentinels() {
		fmt.Fprintf(&b, "  sentinel %-14s %-8s %d/%d available  %s\n", clip(sen.SentinelId, 14), Clean(sen.DesiredState),
			sen.AvailableReplicas, sen.Replicas, Clean(sen.Health))
	}
	for _, p := range d.region.GetPolicies() {
		owner := "environment " + Clean(p.EnvironmentId)
		if p.DeploymentId != "" {
			owner = "deployment " + Clean(p.DeploymentId)
		}
		fmt.Fprintf(&b, "  policy   %-14s (%s)\n", clip(p.Name, 14), owner)
	}

	total := d.pending.GetTotal()
	b.WriteString("\n" + s.Header.Render(fmt.Sprintf("  PENDING CHANGES (%d)", total)) + "\n")
	now := m.opts.Now()
	changes := d.pending.GetChanges() // the oldest pendingShown
	for _, c := range changes {
		fmt.Fprintf(&b, "  %8d %-22s %-20s %s\n", c.Version, Clean(c.ResourceType), clip(c.ResourceId, 20), ago(now, c.CreatedAt.AsTime()))
	}
	if more := total - int64(len(changes)); more > 0 {
		fmt.Fprintf(&b, s.Dim.Render("  ... %d more")+"\n", more)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
