package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

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
	list[*ctrlv1.DeploymentRevision] // filtered; its readAt is zero until the first read
}

// historyMsg is a read of one deployment's revisions.
type historyMsg struct {
	id        string // the deployment asked for
	revisions []*ctrlv1.DeploymentRevision
}

func (p *historyPage) set(revs []*ctrlv1.DeploymentRevision, filter string) {
	p.all = revs
	var rows []*ctrlv1.DeploymentRevision
	for _, r := range revs {
		if strings.Contains(r.GetAction(), filter) || strings.Contains(r.GetActor(), filter) || strings.Contains(r.GetSummary(), filter) {
			rows = append(rows, r)
		}
	}
	p.show(rows, func(r *ctrlv1.DeploymentRevision) string { return fmt.Sprint(r.GetRevision()) })
}

func (p historyPage) title() string { return "history of " + Clean(p.id) + "  (esc: back)" }

func (p historyPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: p.id, Limit: historyShown})
		return historyMsg{p.id, r.GetRevisions()}, err
	}
}

// receive takes the history of this page's deployment only (see
// detailPage.receive).
func (p historyPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	h, ok := msg.(historyMsg)
	if !ok || h.id != p.id {
		return p, false
	}
	p.at = pc.now
	p.set(h.revisions, pc.filter)
	return p, true
}

func (p historyPage) filter(f string) page {
	if !p.readAt().IsZero() {
		p.set(p.all, f)
	}
	return p
}

func (p historyPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	k := pc.keys
	if p.moveKey(msg, k) || p.selected() == nil || !(key.Matches(msg, k.Rollback) || key.Matches(msg, k.Diff)) {
		return p, action{}
	}
	r, ok := p.rollback()
	switch {
	case key.Matches(msg, k.Diff) && p.selected().GetFailed() != "":
		// A failed revision's evidence comes first (and with the diff
		// when there is one to show).
		return p, action{open: rollbackDiffPage{history: p, to: p.selected().GetRevision(), evidence: true}}
	case !ok:
		return p, action{status: "nothing to roll back to: this is the deployment's only revision"}
	case key.Matches(msg, k.Diff):
		return p, action{open: rollbackDiffPage{history: p, to: r.to}}
	}
	return p, action{confirm: p.rollbackConfirmation(r, pc)}
}

// diff is Diff with this page's words.
func (p historyPage) diff(k KeyMap) key.Binding {
	b := k.Diff
	b.SetHelp("d", "diff rollback")
	if p.selected().GetFailed() != "" {
		b.SetHelp("d", "why it failed")
	}
	return b
}

func (p historyPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Back}, p.moveKeys(k)
	if p.selected() != nil {
		short = append(short, k.Rollback, p.diff(k))
		keys = append(keys, k.Rollback, p.diff(k))
	}
	return short, keys
}

func (p historyPage) view(pc pageContext) string {
	s := pc.styles
	if p.readAt().IsZero() {
		return s.Dim.Render("  loading the history of " + Clean(p.id) + " ...\n")
	}
	now := pc.asOf
	var b strings.Builder
	cols := []column{{header: ""}, {header: "REV", numeric: true}, {header: "WHEN", min: 8}, {header: "BY"}, {header: "ACTION"}, {header: "WHAT CHANGED", elide: true}}
	cells := make([][]string, len(p.rows))
	for i, r := range p.rows {
		what := Clean(r.GetSummary())
		if r.GetFailed() != "" {
			what = fmt.Sprintf("FAILED (rollout %d) %s", r.GetFailedRolloutId(), what)
		}
		cells[i] = []string{pc.marker(), fmt.Sprint(r.GetRevision()), ago(now, r.GetCreatedAt().AsTime()), clip(r.GetActor(), 8), clip(r.GetAction(), 10), what}
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("revisions", pc.filter, len(p.all), "no revisions")) + "\n")
	}
	for i, line := range lines[1:] {
		style := s.Plain
		if p.rows[i].GetFailed() != "" {
			style = s.Bad
		}
		b.WriteString(pc.rowStyle(line, i == p.cursor, style) + "\n")
	}
	if r := p.selected(); r != nil {
		b.WriteString("\n" + clip(fmt.Sprintf("  revision %d: %s", r.GetRevision(), specText(r)), pc.width) + "\n")
		b.WriteString(clip(fmt.Sprintf("  by %s at %s, stream versions %d-%d", orNone(Clean(r.GetActor())),
			r.GetCreatedAt().AsTime().In(now.Location()).Format("2006-01-02 15:04:05"), r.GetFirstVersion(), r.GetLastVersion()), pc.width) + "\n")
		if names := r.GetEnvNames(); len(names) > 0 {
			b.WriteString(elide("  env: "+strings.Join(names, ", "), pc.width) + "\n")
		}
		if mark := FailedMark(r); mark != "" {
			b.WriteString(s.Bad.Render(indented("  ", mark+" (d: the evidence)", pc.width, 2)) + "\n")
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

// rollback is what r on the history page asks ctrld for, and what the
// console can tell of it in advance.
type rollback struct {
	current *ctrlv1.DeploymentRevision // the newest revision: the spec now
	// to is the revision sent: the selected one, or, on the newest, 0:
	// ctrld's own default, the newest earlier revision with another spec
	// or other replicas. ctrld finds that one among all revisions and
	// compares port, command and env values too; the console reads only
	// historyShown revisions and is shown none of those values.
	to int32
	// target is the revision the console expects ctrld to restore: the
	// selected one, or, for to 0, the newest earlier one read whose spec
	// or replicas differ in what the console is shown; nil when it sees
	// none.
	target *ctrlv1.DeploymentRevision
}

// rollback is the rollback r asks for on the selected revision; ok is
// false when there is nothing before it to restore. The current spec is
// the newest of all revisions read: the filter may hide it.
func (h historyPage) rollback() (r rollback, ok bool) {
	selected := h.selected()
	if len(h.all) < 2 || selected == nil {
		return r, false // the only revision there is: fewer than historyShown were read
	}
	r.current = h.all[0]
	if selected != r.current {
		r.to, r.target = selected.GetRevision(), selected
		return r, true
	}
	r.target = differingBefore(h.all)
	return r, true
}

// differingBefore is the newest revision after the first of all (the
// current one) whose spec or replicas differ from it in what the console
// is shown: the one the console expects a rollback to 0 to restore; nil
// when it sees none.
func differingBefore(all []*ctrlv1.DeploymentRevision) *ctrlv1.DeploymentRevision {
	for _, earlier := range all[1:] {
		if !sameShownSpecAndReplicas(all[0], earlier) {
			return earlier
		}
	}
	return nil
}

// sameShownSpecAndReplicas is ctrld's rule for "nothing to roll back"
// (desired.sameSpecAndReplicas) applied to what the console is shown:
// image, cpu, memory, env names and the replicas of the same regions;
// desired status aside. Port, command and env values are not shown, so
// true does not mean ctrld finds the two the same.
func sameShownSpecAndReplicas(a, b *ctrlv1.DeploymentRevision) bool {
	if len(specChanges(a, b)) > 0 || len(a.GetRegions()) != len(b.GetRegions()) {
		return false
	}
	for _, r := range a.GetRegions() {
		if regionSpec(b, r.GetRegion()) == nil {
			return false
		}
	}
	return true
}

// regionSpec is r's spec in region, nil when r has none there.
func regionSpec(r *ctrlv1.DeploymentRevision, region string) *ctrlv1.RegionSpec {
	i := slices.IndexFunc(r.GetRegions(), func(s *ctrlv1.RegionSpec) bool { return s.GetRegion() == region })
	if i < 0 {
		return nil
	}
	return r.GetRegions()[i]
}

// specChanges says what restoring to changes from from, as far as the
// console is shown: "image a -> b; replicas us-east 4 -> 3". Only what
// ctrld's Rollback restores: never a region's start or stop, and replicas
// only in regions both have.
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
	if c := envNameChanges(from.GetEnvNames(), to.GetEnvNames()); c != "" {
		out = append(out, c)
	}
	for _, t := range to.GetRegions() {
		if f := regionSpec(from, t.GetRegion()); f != nil && f.GetReplicas() != t.GetReplicas() {
			out = append(out, fmt.Sprintf("replicas %s %d -> %d", t.GetRegion(), f.GetReplicas(), t.GetReplicas()))
		}
	}
	return out
}

// replicasDiffer tells whether a region's replicas differ between the
// revisions.
func replicasDiffer(from, to *ctrlv1.DeploymentRevision) bool {
	for _, t := range to.GetRegions() {
		if f := regionSpec(from, t.GetRegion()); f != nil && f.GetReplicas() != t.GetReplicas() {
			return true
		}
	}
	return false
}

// envNameChanges is "env changes: removes A; adds B" when the names
// differ, "" when they do not (the values may still: they are not shown).
func envNameChanges(from, to []string) string {
	var removed, added []string
	for _, n := range from {
		if !slices.Contains(to, n) {
			removed = append(removed, n)
		}
	}
	for _, n := range to {
		if !slices.Contains(from, n) {
			added = append(added, n)
		}
	}
	var parts []string
	if len(removed) > 0 {
		parts = append(parts, "removes "+strings.Join(removed, ", "))
	}
	if len(added) > 0 {
		parts = append(parts, "adds "+strings.Join(added, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "env changes: " + strings.Join(parts, "; ")
}

// keptStatus says, for each region both have whose desired status
// differs, that it stays as it is: a rollback does not start or stop
// regions, and the operator may expect it to.
func keptStatus(current, target *ctrlv1.DeploymentRevision) []string {
	var out []string
	for _, c := range current.GetRegions() {
		if t := regionSpec(target, c.GetRegion()); t != nil && t.GetStatus() != c.GetStatus() {
			out = append(out, fmt.Sprintf("%s stays %s (rollback does not start or stop regions)", c.GetRegion(), c.GetStatus()))
		}
	}
	return out
}

func (p historyPage) rollbackConfirmation(r rollback, pc pageContext) *confirmation {
	id := p.id
	shownID := Clean(id)
	var question, what string
	var lines []string
	switch {
	case r.to != 0:
		what = fmt.Sprintf("roll back %s to revision %d", shownID, r.to)
		question = fmt.Sprintf("Roll back deployment %s to revision %d (now %d)?", shownID, r.to, r.current.GetRevision())
	case r.target != nil:
		what = fmt.Sprintf("roll back %s to the newest earlier revision that differs", shownID)
		question = fmt.Sprintf("Roll back deployment %s to the newest earlier revision with another spec or other replicas (revision %d, as far as the console can see; now %d)?",
			shownID, r.target.GetRevision(), r.current.GetRevision())
		lines = append(lines, "ctrld picks it among all revisions, comparing port, command and env values too; if it picks a newer one, that one's spec is restored.")
	default:
		what = fmt.Sprintf("roll back %s to the newest earlier revision that differs", shownID)
		question = fmt.Sprintf("Roll back deployment %s to the newest earlier revision with another spec or other replicas (now %d)?", shownID, r.current.GetRevision())
		lines = append(lines, fmt.Sprintf("None of the %d revisions the console read differs in image, cpu, memory, env names or replicas. ctrld searches all revisions and compares port, command and env values too; it refuses if none differs.", len(p.all)))
	}
	failed := r.target.GetFailed() != ""
	if failed {
		lines = append(lines, fmt.Sprintf("Its spec FAILED: rollout %d rolled it back (%s). Rolling back to it retries that spec on purpose: "+
			"type why, and it is audited (as unkey-tui rollback %s --to %d --retry-failed REASON is).",
			r.target.GetFailedRolloutId(), Clean(r.target.GetFailed()), shownID, r.target.GetRevision()))
	}
	if r.target != nil {
		var changes []string
		for _, c := range specChanges(r.current, r.target) {
			changes = append(changes, Clean(c))
		}
		if len(changes) == 0 {
			changes = []string{"nothing the console is shown differs; port, command or env values may (it is not shown them): if they do not, ctrld refuses and changes nothing"}
		} else {
			changes = append(changes, fmt.Sprintf("port, command and env values become revision %d's too (the console is not shown them)", r.target.GetRevision()))
		}
		lines = append(changes, lines...)
		if replicasDiffer(r.current, r.target) {
			// A rollback's replicas are a scale: immediate, in every
			// region, while its spec may roll out wave by wave.
			lines = append(lines, "Replicas change in every region now, as a scale does; the spec reaches regions as the environment's strategy says (wave by wave, if it has waves), and an abort of that rollout returns the spec, not the replicas.")
		}
		for _, kept := range keptStatus(r.current, r.target) {
			lines = append(lines, Clean(kept))
		}
	}
	detail := question + "\n" + strings.Join(lines, "\n")
	// The rollback changes the deployment in every region it runs in now
	// (the target revision's regions may have been others).
	for _, rs := range r.current.GetRegions() {
		detail += pc.regionWarning(rs.GetRegion())
	}
	rollback := func(retryReason string) tea.Cmd {
		return actSaying(what, func(ctx context.Context) (string, error) {
			resp, err := pc.op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: id, ToRevision: r.to, RetryFailedReason: retryReason})
			return fmt.Sprintf("rolled back %s to revision %d; now revision %d", shownID, resp.GetRestored(), resp.GetRevision()), err
		})
	}
	if !failed {
		return &confirmation{what: what, detail: detail, run: rollback("")}
	}
	// A failed spec's retry needs a reason, as the CLI's --retry-failed
	// does: a yes alone would ship what a gate refused.
	f := &form{fields: []formField{newFormField("why retry the failed spec", needed("why"), pc.styles.plain)}}
	f.focused(0)
	f.submit = func(_ int, values []string) tea.Cmd { return rollback(values[0]) }
	return &confirmation{what: what, detail: detail, form: f}
}
