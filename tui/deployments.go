package tui

import (
	"fmt"
	"strings"
	"time"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// deploymentRow is one deployment in one region.
type deploymentRow struct {
	deployment *ctrlv1.DeploymentSummary
	region     *ctrlv1.DeploymentInRegion
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
				rows = append(rows, &deploymentRow{deployment: d, region: r})
			}
		}
	}
	p.show(rows, func(r *deploymentRow) string { return r.deployment.GetDeploymentId() + "/" + r.region.GetRegion() })
}

func (m Model) renderDeployments() string {
	s := m.styles
	now := m.asOf()
	var b strings.Builder
	b.WriteString(s.Header.Render(fmt.Sprintf("  %-18s %-10s %-8s %4s %7s %-11s %s", "DEPLOYMENT", "REGION", "DESIRED", "REPL", "READY", "ACTUAL", "WORKFLOW")) + "\n")
	if len(m.deployments.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", m.filter, len(m.deployments.all), "no deployments yet")) + "\n")
	}
	for i, r := range m.deployments.rows {
		line := fmt.Sprintf("%s %-18s %-10s %-8s %4d %3d/%-3d %-11s %s", m.marker(), clip(r.deployment.DeploymentId, 18), clip(r.region.GetRegion(), 10),
			Clean(r.region.DesiredStatus), r.region.Replicas, r.region.ReadyInstances, r.region.Instances, Clean(r.region.ActualStatus),
			workflowShown(r.region, r.deployment.WorkflowStatus))
		style := s.Plain
		if r.deployment.WorkflowStatus == "failed" {
			style = s.Bad
		}
		b.WriteString(m.rowStyle(clip(line, m.width), i == m.deployments.cursor, style) + "\n")
		b.WriteString(m.noteLine(syncNote(r.region, now)))
	}
	if r := m.deployments.selected(); r != nil && r.deployment.WorkflowError != "" {
		b.WriteString("\n" + s.Bad.Render("workflow: ") + elide(r.deployment.WorkflowError, m.width-10) + "\n")
	}
	return b.String()
}

// workflowShown is the deploy workflow's status on a deployment's row in
// a region. Where the deployment is stopped, the workflow's "ready" (it
// once became ready) would read as if it ran: "-" instead.
func workflowShown(d *ctrlv1.DeploymentInRegion, workflow string) string {
	if d.GetDesiredStatus() == "stopped" {
		return "-"
	}
	return Clean(workflow)
}

// syncNote says why a deployment is not in sync in its region, in a few
// words: its apply failing since when with the error's end, else what it
// waits for. Empty when it is in sync.
func syncNote(d *ctrlv1.DeploymentInRegion, now time.Time) string {
	if failing := applyFailing(d.GetSync(), now); failing != "" {
		return failing
	}
	var waits []string
	for _, r := range d.GetNotInSync() {
		switch r.GetCode() {
		case "paused":
			waits = append(waits, "region paused")
		case "agent_down", "no_agent":
			waits = append(waits, "agent down")
		default:
			waits = append(waits, reasonText(r))
		}
	}
	if n := d.GetSync().GetPendingChanges(); len(waits) == 0 && n > 0 {
		waits = append(waits, fmt.Sprintf("%d pending changes", n))
	}
	if len(waits) == 0 {
		return ""
	}
	return "waits: " + strings.Join(waits, "; ")
}

// applyFailing says how long a resource's apply has failed and why:
// "apply failing 3m: <error>". Empty when it does not fail.
func applyFailing(sync *ctrlv1.ResourceSyncState, now time.Time) string {
	if sync.GetError() == "" {
		return ""
	}
	failing := "apply failing"
	if sync.GetFailingSince() != nil {
		failing += " " + span(now.Sub(sync.GetFailingSince().AsTime()))
	}
	return failing + ": " + sync.GetError()
}

// noteLine is the line under a resource's row that says why it is not in
// sync (see syncNote, applyFailing); nothing when note is empty.
func (m Model) noteLine(note string) string {
	if note == "" {
		return ""
	}
	style := m.styles.Warn
	if m.stale() {
		style = m.styles.Dim
	}
	return style.Render(elide(m.marker()+"   ↳ "+note, m.width)) + "\n"
}

// marker starts a row: "?" while the data is stale (see rowStyle).
func (m Model) marker() string {
	if m.stale() {
		return "?"
	}
	return " "
}
