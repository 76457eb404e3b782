package tui

import (
	"fmt"
	"strings"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// deploymentRow is one deployment in one region.
type deploymentRow struct {
	deployment *ctrlv1.DeploymentSummary
	region     *ctrlv1.DeploymentInRegion
	name       string // the region
}

// deploymentsPage lists every deployment per region, newest first.
type deploymentsPage struct {
	all                  []*ctrlv1.DeploymentSummary
	list[*deploymentRow] // all, per region, filtered
}

func (p *deploymentsPage) set(deps []*ctrlv1.DeploymentSummary, filter string) {
	p.all = deps
	var rows []*deploymentRow
	for _, d := range deps {
		for _, r := range d.GetRegions() {
			if strings.Contains(d.GetDeploymentId(), filter) || strings.Contains(r.GetRegion(), filter) {
				rows = append(rows, &deploymentRow{deployment: d, region: r, name: r.GetRegion()})
			}
		}
	}
	p.show(rows, func(r *deploymentRow) string { return r.deployment.GetDeploymentId() + "/" + r.name })
}

func (m Model) renderDeployments() string {
	s := m.styles
	var b strings.Builder
	b.WriteString(s.Header.Render(fmt.Sprintf("  %-18s %-10s %-8s %4s %7s %-11s %s", "DEPLOYMENT", "REGION", "DESIRED", "REPL", "READY", "ACTUAL", "WORKFLOW")) + "\n")
	if len(m.deployments.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", m.filter, len(m.deployments.all), "no deployments yet")) + "\n")
	}
	for i, r := range m.deployments.rows {
		line := fmt.Sprintf("  %-18s %-10s %-8s %4d %3d/%-3d %-11s %s", clip(r.deployment.DeploymentId, 18), clip(r.name, 10),
			Clean(r.region.DesiredStatus), r.region.Replicas, r.region.ReadyInstances, r.region.Instances, Clean(r.region.ActualStatus), Clean(r.deployment.WorkflowStatus))
		line = clip(line, m.width)
		if i == m.deployments.cursor {
			line = s.Selected.Render(line)
		} else if r.deployment.WorkflowStatus == "failed" {
			line = s.Bad.Render(line)
		}
		b.WriteString(line + "\n")
	}
	if r := m.deployments.selected(); r != nil && r.deployment.WorkflowError != "" {
		b.WriteString("\n" + s.Bad.Render("workflow: ") + clip(r.deployment.WorkflowError, m.width-12) + "\n")
	}
	return b.String()
}
