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

// deploymentRow is one deployment in one region.
type deploymentRow struct {
	deployment *ctrlv1.DeploymentSummary
	region     *ctrlv1.DeploymentInRegion
}

// deploymentsMsg is a read of every deployment, with the regions' health
// for the confirmations' warnings.
type deploymentsMsg struct {
	deployments []*ctrlv1.DeploymentSummary
	regions     []*ctrlv1.RegionOverview
}

// deploymentsPage lists every deployment per region, newest first unless
// sorted by a column.
type deploymentsPage struct {
	all                  []*ctrlv1.DeploymentSummary
	list[*deploymentRow]         // all, per region, filtered, sorted
	sort                 sorting // by deploymentSortColumns
}

// deploymentSortColumns are the deployments table's columns it sorts by;
// numbers sort as numbers (READY by the ready instances).
var deploymentSortColumns = []sortColumn[*deploymentRow]{
	{"DEPLOYMENT", byString(func(r *deploymentRow) string { return r.deployment.GetDeploymentId() })},
	{"REGION", byString(func(r *deploymentRow) string { return r.region.GetRegion() })},
	{"DESIRED", byString(func(r *deploymentRow) string { return r.region.GetDesiredStatus() })},
	{"REPL", byNumber(func(r *deploymentRow) int32 { return r.region.GetReplicas() })},
	{"READY", byNumber(func(r *deploymentRow) int32 { return r.region.GetReadyInstances() })},
	{"ACTUAL", byString(func(r *deploymentRow) string { return r.region.GetActualStatus() })},
	{"WORKFLOW", byString(func(r *deploymentRow) string { return workflowShown(r.region, r.deployment.GetWorkflowStatus()) })},
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
	sortRows(rows, deploymentSortColumns, p.sort)
	p.show(rows, func(r *deploymentRow) string { return r.deployment.GetDeploymentId() + "/" + r.region.GetRegion() })
}

func (deploymentsPage) title() string { return "deployments" }

func (deploymentsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
		if err != nil {
			return nil, err
		}
		regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		return deploymentsMsg{r.GetDeployments(), regions.GetRegions()}, err
	}
}

func (p deploymentsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	d, ok := msg.(deploymentsMsg)
	if !ok {
		return p, false
	}
	p.at = pc.now
	p.set(d.deployments, pc.filter)
	return p, true
}

func (p deploymentsPage) filter(f string) page {
	p.set(p.all, f)
	return p
}

func (p deploymentsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	r, k := p.selected(), pc.keys
	if p.moveKey(msg, k) || r == nil {
		return p, action{}
	}
	if p.sort.key(msg, k, len(deploymentSortColumns)) {
		p.set(p.all, pc.filter)
		return p, action{}
	}
	region := r.region.GetRegion()
	switch {
	case key.Matches(msg, k.Stop):
		return p, action{confirm: pc.statusConfirmation(r.region, region, ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED)}
	case key.Matches(msg, k.Start):
		return p, action{confirm: pc.statusConfirmation(r.region, region, ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING)}
	case key.Matches(msg, k.ScaleUp):
		return p, action{confirm: pc.scaleConfirmation(r.region, region, r.region.GetReplicas()+1)}
	case key.Matches(msg, k.ScaleDown) && r.region.GetReplicas() > 0:
		return p, action{confirm: pc.scaleConfirmation(r.region, region, r.region.GetReplicas()-1)}
	case key.Matches(msg, k.History):
		return p, action{open: historyPage{id: r.deployment.GetDeploymentId()}}
	case key.Matches(msg, k.Rollout):
		return p, action{open: rolloutPage{id: r.deployment.GetDeploymentId()}}
	case key.Matches(msg, k.YAML):
		return p, action{open: yamlPage{id: r.deployment.GetDeploymentId(), region: region}}
	case key.Matches(msg, k.Pods):
		return p, action{open: newPodsPage(r.deployment.GetDeploymentId(), region, nil)}
	}
	return p, action{}
}

func (p deploymentsPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Switch}, p.moveKeys(k)
	if p.selected() != nil {
		short = append(short, k.Pods, k.History, k.Rollout, p.sort.short(k))
		keys = append(keys, k.Stop, k.Start, k.ScaleUp, k.Pods, k.History, k.Rollout, k.YAML)
		keys = append(keys, p.sort.keys(k)...)
	}
	return short, keys
}

func (p deploymentsPage) view(pc pageContext) string {
	s := pc.styles
	now := pc.asOf
	h := func(header string) string { return mark(header, deploymentSortColumns, p.sort) }
	cols := []column{{header: ""}, {header: h("DEPLOYMENT")}, {header: h("REGION")}, {header: h("DESIRED")}, {header: h("REPL"), numeric: true}, {header: h("READY"), numeric: true},
		{header: h("ACTUAL")}, {header: h("WORKFLOW")}}
	cells := make([][]string, len(p.rows))
	for i, r := range p.rows {
		cells[i] = []string{pc.marker(), clip(r.deployment.DeploymentId, 18), clip(r.region.GetRegion(), 10), clip(r.region.DesiredStatus, 8),
			fmt.Sprint(r.region.Replicas), fmt.Sprintf("%d/%d", r.region.ReadyInstances, r.region.Instances), clip(r.region.ActualStatus, 11),
			workflowShown(r.region, r.deployment.WorkflowStatus)}
	}
	lines := tableLines(cols, cells, pc.width)
	var b strings.Builder
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("deployments", pc.filter, len(p.all), "no deployments yet")) + "\n")
	}
	for i, r := range p.rows {
		style := s.Plain
		if r.deployment.WorkflowStatus == "failed" {
			style = s.Bad
		}
		b.WriteString(pc.rowStyle(lines[i+1], i == p.cursor, style) + "\n")
		b.WriteString(pc.noteLine(syncNote(r.region, now)))
	}
	if r := p.selected(); r != nil && r.deployment.WorkflowError != "" {
		b.WriteString("\n" + s.Bad.Render("workflow: ") + elide(r.deployment.WorkflowError, pc.width-10) + "\n")
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
// waits for; then why its instances are not ready ("3 of 3 instances
// CrashLoopBackOff (restarts 5)"). Empty when it is in sync and ready.
func syncNote(d *ctrlv1.DeploymentInRegion, now time.Time) string {
	var notes []string
	if failing := applyFailing(d.GetSync(), now); failing != "" {
		notes = append(notes, failing)
	} else if waits := waitsNote(d); waits != "" {
		notes = append(notes, waits)
	}
	return strings.Join(append(notes, NotReady(d)...), "; ")
}

// instancesNotReady is the reason code of instances that are not ready
// (regionhealth.ReasonInstancesNotReady).
const instancesNotReady = "instances_not_ready"

// NotReady says why a deployment's instances in its region are not
// ready, one reason a line, in the server's words; none when nothing says.
func NotReady(d *ctrlv1.DeploymentInRegion) []string {
	var out []string
	for _, r := range d.GetNotInSync() {
		if r.GetCode() == instancesNotReady {
			out = append(out, Clean(r.GetMessage()))
		}
	}
	return out
}

// waitsNote says what a deployment's changes wait for in its region.
func waitsNote(d *ctrlv1.DeploymentInRegion) string {
	var waits []string
	for _, r := range d.GetNotInSync() {
		switch r.GetCode() {
		case instancesNotReady:
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
