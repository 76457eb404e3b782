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

// diffLine is one line of a diff, unified-diff-like: sign '-' is what
// goes, '+' what comes, ' ' what stays, and '~' what changes in a way the
// console is not shown (an env value, the command).
type diffLine struct {
	sign byte
	text string
}

// change is a field's old and new value as diff lines: one line if they
// are the same, a "-" and a "+" if not.
func change(field, was, now string) []diffLine {
	if was == now {
		return []diffLine{{' ', field + " " + was}}
	}
	return []diffLine{{'-', field + " " + was}, {'+', field + " " + now}}
}

// rollbackDiff is what rolling back from current to target changes, as
// far as the console is shown (see specChanges): image, cpu, memory, env
// names (never values) and the replicas of the regions both have; the
// fields that stay are shown too, as a diff's context.
func rollbackDiff(current, target *ctrlv1.DeploymentRevision) []diffLine {
	var out []diffLine
	out = append(out, change("image", current.GetImage(), target.GetImage())...)
	out = append(out, change("cpu", fmt.Sprintf("%dm", current.GetCpuMillicores()), fmt.Sprintf("%dm", target.GetCpuMillicores()))...)
	out = append(out, change("memory", fmt.Sprintf("%d MiB", current.GetMemoryMib()), fmt.Sprintf("%d MiB", target.GetMemoryMib()))...)
	names := slices.Concat(current.GetEnvNames(), target.GetEnvNames())
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		was, now := slices.Contains(current.GetEnvNames(), n), slices.Contains(target.GetEnvNames(), n)
		sign := byte(' ')
		switch {
		case !now:
			sign = '-'
		case !was:
			sign = '+'
		}
		out = append(out, diffLine{sign, "env " + n})
	}
	for _, c := range current.GetRegions() {
		t := regionSpec(target, c.GetRegion())
		if t == nil {
			// ctrld restores replicas only where both have the region.
			out = append(out, diffLine{' ', fmt.Sprintf("replicas %s %d (revision %d has none there: kept)", c.GetRegion(), c.GetReplicas(), target.GetRevision())})
			continue
		}
		out = append(out, change("replicas "+c.GetRegion(), fmt.Sprint(c.GetReplicas()), fmt.Sprint(t.GetReplicas()))...)
	}
	return out
}

// summaryDiff is a pending change's summary (ctrld's words, "image a ->
// b; replicas 3 -> 4; env FOO changed; stopped") as a diff: "x a -> b"
// as "- x a" and "+ x b", what came or went as "+" or "-", a value
// changed that the console is not shown as "~", anything else as it
// reads. head is what a later wave's promotion says first ("rollout to
// revision 7, wave 2 of 3").
func summaryDiff(summary string) (head string, lines []diffLine) {
	if before, after, ok := strings.Cut(summary, ": "); ok && strings.HasPrefix(before, "rollout to revision") {
		head, summary = before, after
	}
	if summary == "" {
		return head, nil
	}
	for _, part := range strings.Split(summary, "; ") {
		lines = append(lines, partDiff(part)...)
	}
	return head, lines
}

// partDiff is one part of a summary as diff lines (see summaryDiff).
func partDiff(part string) []diffLine {
	if left, now, ok := strings.Cut(part, " -> "); ok {
		field, was := "", left
		if i := strings.LastIndex(left, " "); i >= 0 {
			field, was = left[:i], left[i+1:]
		}
		return []diffLine{{'-', strings.TrimSpace(field + " " + was)}, {'+', strings.TrimSpace(field + " " + now)}}
	}
	for _, s := range []struct{ word, was, now string }{{"stopped", "running", "stopped"}, {"started", "stopped", "running"}} {
		if region, ok := strings.CutPrefix(part, s.word); ok && (region == "" || strings.HasPrefix(region, " in ")) {
			field := "status" + strings.TrimPrefix(region, " in")
			return []diffLine{{'-', field + " " + s.was}, {'+', field + " " + s.now}}
		}
	}
	if name, ok := strings.CutPrefix(part, "env "); ok {
		switch {
		case strings.HasSuffix(name, " added"):
			return []diffLine{{'+', "env " + strings.TrimSuffix(name, " added")}}
		case strings.HasSuffix(name, " removed"):
			return []diffLine{{'-', "env " + strings.TrimSuffix(name, " removed")}}
		case strings.HasSuffix(name, " changed"):
			return []diffLine{{'~', "env " + strings.TrimSuffix(name, " changed") + ": value changed (values are never shown)"}}
		}
	}
	switch {
	case part == "command changed":
		return []diffLine{{'~', "command changed (the console is not shown it)"}}
	case part == "created", strings.HasPrefix(part, "created: "), strings.HasPrefix(part, "added in "):
		return []diffLine{{'+', part}}
	case part == "deleted", strings.HasPrefix(part, "removed from "):
		return []diffLine{{'-', part}}
	}
	return []diffLine{{' ', part}}
}

// diffText draws a diff from was to now: a "---" and a "+++" line
// naming them, then its lines, "-" in the removed style, "+" in the added
// one, each cut to the width from its middle, the marker first (see
// pageContext.marker).
func (pc pageContext) diffText(was, now string, lines []diffLine) string {
	var b strings.Builder
	b.WriteString(pc.styles.Removed.Render(elide(pc.marker()+" --- "+was, pc.width)) + "\n")
	b.WriteString(pc.styles.Added.Render(elide(pc.marker()+" +++ "+now, pc.width)) + "\n")
	for _, l := range lines {
		style := pc.styles.Plain
		switch l.sign {
		case '-':
			style = pc.styles.Removed
		case '+':
			style = pc.styles.Added
		case '~':
			style = pc.styles.Warn
		}
		if pc.stale {
			style = pc.styles.Dim
		}
		b.WriteString(style.Render(elide(pc.marker()+" "+string(l.sign)+" "+l.text, pc.width)) + "\n")
	}
	return b.String()
}

// rollbackDiffPage is what rolling a deployment back to a revision
// would change (d on the history page): the deployment's spec now
// against the revision's, read with the history, so it follows the
// history while shown. esc returns to the history.
type rollbackDiffPage struct {
	history historyPage
	// to is the revision, or 0 for ctrld's own choice (see rollback.to).
	to int32
	// evidence: opened on a failed revision, whose evidence it shows
	// first.
	evidence bool
}

func (p rollbackDiffPage) parent() page { return p.history }

func (p rollbackDiffPage) title() string {
	if p.evidence {
		return fmt.Sprintf("revision %d of %s: why it failed, and its rollback  (esc: back)", p.to, Clean(p.history.id))
	}
	return "diff of a rollback of " + Clean(p.history.id) + "  (esc: back)"
}

func (p rollbackDiffPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return p.history.read(op)
}

func (p rollbackDiffPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	h, ok := p.history.receive(msg, pc)
	p.history = h.(historyPage)
	return p, ok
}

func (p rollbackDiffPage) filter(string) page                                 { return p }
func (p rollbackDiffPage) readAt() time.Time                                  { return p.history.readAt() }
func (p rollbackDiffPage) update(tea.KeyPressMsg, pageContext) (page, action) { return p, action{} }
func (p rollbackDiffPage) help(k KeyMap) (short, keys []key.Binding) {
	return []key.Binding{k.Back}, nil
}

// target is the revision the rollback restores, as far as the console
// can tell (see rollback.target), and the current one; target is nil
// when it sees none.
func (p rollbackDiffPage) target() (current, target *ctrlv1.DeploymentRevision) {
	all := p.history.all
	if len(all) == 0 {
		return nil, nil
	}
	current = all[0]
	if p.to == 0 {
		return current, differingBefore(all)
	}
	i := slices.IndexFunc(all, func(r *ctrlv1.DeploymentRevision) bool { return r.GetRevision() == p.to })
	if i < 0 {
		return current, nil
	}
	return current, all[i]
}

func (p rollbackDiffPage) view(pc pageContext) string {
	s := pc.styles
	if p.readAt().IsZero() {
		return s.Dim.Render("  loading the history of " + Clean(p.history.id) + " ...\n")
	}
	current, target := p.target()
	var b strings.Builder
	line := func(text string) { b.WriteString(indented("  ", text, pc.width, 3) + "\n") }
	if p.evidence && target != nil && target.GetFailed() != "" {
		b.WriteString(s.Bad.Render(elide(fmt.Sprintf("  revision %d FAILED: rollout %d rolled its spec back, on this evidence:", target.GetRevision(),
			target.GetFailedRolloutId()), pc.width)) + "\n")
		b.WriteString(indented("    ", Clean(target.GetFailed()), pc.width, 6) + "\n")
		line("Deploying, updating or rolling back to this spec again is refused unless retried on purpose, with a reason (--retry-failed REASON).")
		b.WriteString("\n")
		if target == current {
			return b.String() // the spec now: no rollback to show
		}
	}
	switch {
	case target == nil && p.to != 0:
		line(fmt.Sprintf("revision %d is not among the %d newest revisions read", p.to, len(p.history.all)))
		return b.String()
	case target == nil:
		line(fmt.Sprintf("None of the %d revisions read differs in image, cpu, memory, env names or replicas; ctrld compares port, command and env values too, and refuses if none differs.", len(p.history.all)))
		return b.String()
	case p.to == 0:
		line(fmt.Sprintf("From the newest revision, a rollback goes where ctrld picks: the newest earlier revision with another spec or other replicas (revision %d, as far as the console can see).", target.GetRevision()))
		b.WriteString("\n")
	}
	b.WriteString(s.Header.Render(elide(fmt.Sprintf("  rolling %s back to revision %d changes:", Clean(p.history.id), target.GetRevision()), pc.width)) + "\n")
	b.WriteString(pc.diffText(fmt.Sprintf("revision %d (now)", current.GetRevision()), fmt.Sprintf("revision %d", target.GetRevision()),
		rollbackDiff(current, target)))
	b.WriteString("\n")
	line(fmt.Sprintf("port, command and env values become revision %d's too (the console is not shown them).", target.GetRevision()))
	for _, kept := range keptStatus(current, target) {
		line(kept)
	}
	return b.String()
}

// pendingDiffPage is a region's pending changes with the selected one's
// summary as a diff (d on the region page), read with the region, so it
// follows it while shown. esc returns to the region.
type pendingDiffPage struct {
	region                      detailPage
	list[*ctrlv1.PendingChange] // the changes read, filtered
}

func (p *pendingDiffPage) set(filter string) {
	var rows []*ctrlv1.PendingChange
	for _, c := range p.region.pending.GetChanges() {
		if strings.Contains(c.GetResourceId(), filter) || strings.Contains(c.GetKind(), filter) || strings.Contains(c.GetSummary(), filter) {
			rows = append(rows, c)
		}
	}
	p.show(rows, func(c *ctrlv1.PendingChange) string { return fmt.Sprint(c.GetVersion()) })
	p.at = p.region.readAt()
}

func (p pendingDiffPage) parent() page { return p.region }

func (p pendingDiffPage) title() string {
	return "pending changes of " + Clean(p.region.name) + " as a diff  (esc: back)"
}

func (p pendingDiffPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return p.region.read(op)
}

func (p pendingDiffPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := p.region.receive(msg, pc)
	if ok {
		p.region = r.(detailPage)
		p.set(pc.filter)
	}
	return p, ok
}

func (p pendingDiffPage) filter(f string) page {
	p.set(f)
	return p
}

func (p pendingDiffPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	p.moveKey(msg, pc.keys)
	return p, action{}
}

func (p pendingDiffPage) help(k KeyMap) (short, keys []key.Binding) {
	return []key.Binding{k.Back}, p.moveKeys(k)
}

func (p pendingDiffPage) view(pc pageContext) string {
	s := pc.styles
	if p.readAt().IsZero() {
		return s.Dim.Render("  loading " + Clean(p.region.name) + " ...\n")
	}
	now := pc.asOf
	var b strings.Builder
	total := p.region.pending.GetTotal()
	b.WriteString(s.Header.Render(clip(fmt.Sprintf("  PENDING CHANGES (%d): version, age, by, resource, change", total), pc.width)) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("pending changes", pc.filter, len(p.region.pending.GetChanges()), "no pending changes: the region has all of them")) + "\n")
	}
	for i, line := range pc.pendingLines(p.rows, now) {
		b.WriteString(pc.rowStyle(line, i == p.cursor, s.Plain) + "\n")
	}
	if more := total - int64(len(p.region.pending.GetChanges())); more > 0 {
		fmt.Fprintf(&b, s.Dim.Render("  ... %d more")+"\n", more)
	}
	c := p.selected()
	if c == nil {
		return b.String()
	}
	resource := Clean(pendingKind(c) + "/" + c.GetResourceId())
	head, lines := summaryDiff(Clean(c.GetSummary()))
	b.WriteString("\n" + s.Header.Render(elide(fmt.Sprintf("  version %d, %s, by %s:", c.GetVersion(), resource, orNone(Clean(c.GetActor()))), pc.width)) + "\n")
	if head != "" {
		b.WriteString(elide("  "+head, pc.width) + "\n")
	}
	if len(lines) == 0 {
		b.WriteString(s.Dim.Render(elide("  ctrld does not say what this change changes", pc.width)) + "\n")
	}
	b.WriteString(pc.diffText(fmt.Sprintf("%s before version %d", resource, c.GetVersion()), fmt.Sprintf("%s at version %d", resource, c.GetVersion()), lines))
	return b.String()
}
