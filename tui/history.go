package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/charmbracelet/x/ansi"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// historyShown is how many revisions the history page reads.
const historyShown = 50

// historyPage is one deployment's revisions, newest first: what each
// changed, who, when, and the spec it left.
type historyPage struct {
	id string // the deployment
	// all is every revision read, newest (the current spec) first; the
	// list holds those the filter matches by action, actor or summary.
	all                              []*ctrlv1.DeploymentRevision
	list[*ctrlv1.DeploymentRevision] // filtered
	loaded                           bool
}

func (p *historyPage) set(revs []*ctrlv1.DeploymentRevision, filter string) {
	p.all, p.loaded = revs, true
	var rows []*ctrlv1.DeploymentRevision
	for _, r := range revs {
		if strings.Contains(r.GetAction(), filter) || strings.Contains(r.GetActor(), filter) || strings.Contains(r.GetSummary(), filter) {
			rows = append(rows, r)
		}
	}
	p.show(rows, func(r *ctrlv1.DeploymentRevision) string { return fmt.Sprint(r.GetRevision()) })
}

func (m Model) renderHistory() string {
	s := m.styles
	h := m.history
	if !h.loaded {
		return s.Dim.Render("  loading the history of " + Clean(h.id) + " ...\n")
	}
	now := m.asOf()
	var b strings.Builder
	b.WriteString(s.Header.Render(fmt.Sprintf("  %4s %-8s %-8s %-10s %s", "REV", "WHEN", "BY", "ACTION", "WHAT CHANGED")) + "\n")
	if len(h.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("revisions", m.filter, len(h.all), "no revisions")) + "\n")
	}
	for i, r := range h.rows {
		line := fmt.Sprintf("%s %4d %-8s %-8s %-10s ", m.marker(), r.GetRevision(), ago(now, r.GetCreatedAt().AsTime()), clip(r.GetActor(), 8), clip(r.GetAction(), 10))
		line += elide(r.GetSummary(), m.width-ansi.StringWidth(line))
		b.WriteString(m.rowStyle(line, i == h.cursor, s.Plain) + "\n")
	}
	if r := h.selected(); r != nil {
		b.WriteString("\n" + clip(fmt.Sprintf("  revision %d: %s", r.GetRevision(), specText(r)), m.width) + "\n")
		b.WriteString(clip(fmt.Sprintf("  by %s at %s, stream versions %d-%d", orNone(Clean(r.GetActor())),
			r.GetCreatedAt().AsTime().In(now.Location()).Format("2006-01-02 15:04:05"), r.GetFirstVersion(), r.GetLastVersion()), m.width) + "\n")
		if names := r.GetEnvNames(); len(names) > 0 {
			b.WriteString(elide("  env: "+strings.Join(names, ", "), m.width) + "\n")
		}
	}
	return b.String()
}

// specText is a revision's spec in one line: image, resources, and
// replicas and status per region.
func specText(r *ctrlv1.DeploymentRevision) string {
	var regions []string
	for _, rs := range r.GetRegions() {
		regions = append(regions, fmt.Sprintf("%s %d %s", rs.GetRegion(), rs.GetReplicas(), rs.GetStatus()))
	}
	return fmt.Sprintf("%s, %dm cpu, %d MiB; %s", r.GetImage(), r.GetCpuMillicores(), r.GetMemoryMib(), strings.Join(regions, ", "))
}

// rollbackTarget is the revision a rollback from the history page
// restores: the selected one, or, on the newest (the current spec), the
// newest earlier one whose spec differs, as ctrld's own default does.
// Both are found among all revisions: the filter may hide the newest.
func (h historyPage) rollbackTarget() (current, target *ctrlv1.DeploymentRevision) {
	selected := h.selected()
	if len(h.all) < 2 || selected == nil {
		return nil, nil
	}
	current = h.all[0]
	if selected != current {
		return current, selected
	}
	for _, r := range h.all[1:] {
		if specText(r) != specText(current) {
			return current, r
		}
	}
	return current, nil
}

// specChanges says what restoring to changes from from: "image a -> b;
// replicas us-east 4 -> 3".
func specChanges(from, to *ctrlv1.DeploymentRevision) []string {
	var out []string
	if from.GetImage() != to.GetImage() {
		out = append(out, fmt.Sprintf("image %s -> %s", from.GetImage(), to.GetImage()))
	}
	if from.GetCpuMillicores() != to.GetCpuMillicores() {
		out = append(out, fmt.Sprintf("cpu %dm -> %dm", from.GetCpuMillicores(), to.GetCpuMillicores()))
	}
	if from.GetMemoryMib() != to.GetMemoryMib() {
		out = append(out, fmt.Sprintf("memory %d -> %d MiB", from.GetMemoryMib(), to.GetMemoryMib()))
	}
	if !slices.Equal(from.GetEnvNames(), to.GetEnvNames()) {
		out = append(out, fmt.Sprintf("env %v -> %v", from.GetEnvNames(), to.GetEnvNames()))
	}
	for _, t := range to.GetRegions() {
		i := slices.IndexFunc(from.GetRegions(), func(f *ctrlv1.RegionSpec) bool { return f.GetRegion() == t.GetRegion() })
		if i < 0 {
			continue
		}
		f := from.GetRegions()[i]
		if f.GetReplicas() != t.GetReplicas() {
			out = append(out, fmt.Sprintf("replicas %s %d -> %d", t.GetRegion(), f.GetReplicas(), t.GetReplicas()))
		}
		if f.GetStatus() != t.GetStatus() {
			out = append(out, fmt.Sprintf("%s %s -> %s", t.GetRegion(), f.GetStatus(), t.GetStatus()))
		}
	}
	return out
}

func (m Model) rollbackConfirmation(current, target *ctrlv1.DeploymentRevision) *confirmation {
	id := m.history.id
	shownID := Clean(id)
	what := fmt.Sprintf("roll back %s to revision %d", shownID, target.GetRevision())
	done := fmt.Sprintf("rolled back %s to revision %d", shownID, target.GetRevision())
	var changes []string
	for _, c := range specChanges(current, target) {
		changes = append(changes, Clean(c))
	}
	if len(changes) == 0 {
		changes = []string{"nothing differs from the current spec"}
	}
	detail := fmt.Sprintf("Roll back deployment %s to revision %d (now %d)?\n%s", shownID, target.GetRevision(), current.GetRevision(),
		strings.Join(changes, "\n"))
	for _, r := range target.GetRegions() {
		detail += m.regionWarning(r.GetRegion())
	}
	return &confirmation{
		what:   what,
		done:   done,
		detail: detail,
		run: m.act(what, done, func(ctx context.Context) error {
			_, err := m.op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: id, ToRevision: target.GetRevision()})
			return err
		}),
	}
}
