package tui

import (
	"context"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fleetMsg is a read of the fleet's controls and rollouts in flight.
type fleetMsg struct{ fleet *ctrlv1.GetFleetResponse }

// fleetItem is a row of the fleet page the cursor can be on: a halt that
// stands (p lifts it) or a rollout under a region of its current wave
// (enter opens it).
type fleetItem struct {
	halt *ctrlv1.FleetHalt
	row  *FleetRow
}

func (i fleetItem) key() string {
	if i.halt != nil {
		return fmt.Sprintf("halt %d", i.halt.GetId())
	}
	return i.row.Environment + " " + i.row.Region + " " + i.row.Rollout.GetDeploymentId()
}

// fleetPage is everything in flight and what steers it (F, or :fleet):
// the halts that stand, the freeze windows, the pacing bounds, and the
// rollouts in flight per environment and region of their current wave,
// by state, each held one with why. From it: H halts everywhere, the
// selected rollout's environment or its region (a reason asked for); p
// lifts the selected halt.
type fleetPage struct {
	fleet           *ctrlv1.GetFleetResponse
	list[fleetItem] // the halts, then the rollouts' rows, filtered
}

func (p *fleetPage) set(f *ctrlv1.GetFleetResponse, filter string) {
	p.fleet = f
	var items []fleetItem
	for _, h := range f.GetHalts() {
		if strings.Contains(h.GetReason(), filter) || strings.Contains(ScopeText(h.GetScope()), filter) || strings.Contains(h.GetActor(), filter) {
			items = append(items, fleetItem{halt: h})
		}
	}
	for _, row := range FleetRows(f.GetRollouts()) {
		r := row.Rollout
		if strings.Contains(row.Environment, filter) || strings.Contains(row.Region, filter) || strings.Contains(r.GetDeploymentId(), filter) ||
			strings.Contains(r.GetState(), filter) || strings.Contains(HoldOf(r), filter) {
			items = append(items, fleetItem{row: &row})
		}
	}
	p.show(items, fleetItem.key)
}

func (fleetPage) title() string { return "fleet  (esc: back)" }

func (fleetPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.GetFleet(ctx, &ctrlv1.GetFleetRequest{})
		return fleetMsg{r}, err
	}
}

func (p fleetPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	f, ok := msg.(fleetMsg)
	if !ok {
		return p, false
	}
	p.at = pc.now
	p.set(f.fleet, pc.filter)
	return p, true
}

func (p fleetPage) filter(f string) page {
	if !p.readAt().IsZero() {
		p.set(p.fleet, f)
	}
	return p
}

// open is Open with this page's words; lift is Pause's.
func (fleetPage) open(k KeyMap) key.Binding { return shortly(k.Open, "open rollout") }
func (fleetPage) lift(k KeyMap) key.Binding { return shortly(k.Pause, "lift halt") }

func (p fleetPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	if p.moveKey(msg, pc.keys) || p.readAt().IsZero() {
		return p, action{}
	}
	item := p.selected()
	switch {
	case key.Matches(msg, pc.keys.Halt):
		var scopes []haltScope
		if item.row != nil {
			scopes = rolloutScopes(item.row.Rollout, item.row.Region)
		}
		return p, action{confirm: pc.haltConfirmation(scopes, p.fleet.GetRollouts())}
	case item.halt != nil && key.Matches(msg, p.lift(pc.keys)):
		return p, action{confirm: pc.liftConfirmation(item.halt)}
	case item.row != nil && key.Matches(msg, p.open(pc.keys)):
		return p, action{open: rolloutPage{id: item.row.Rollout.GetDeploymentId(), from: p}}
	}
	return p, action{}
}

func (p fleetPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Back}, p.moveKeys(k)
	if p.readAt().IsZero() {
		return short, keys
	}
	if k.Halt.Enabled() {
		short, keys = append(short, shortly(k.Halt, "halt")), append(keys, k.Halt)
	}
	item := p.selected()
	switch {
	case item.halt != nil && k.Pause.Enabled():
		short, keys = append(short, p.lift(k)), append(keys, p.lift(k))
	case item.row != nil:
		short, keys = append(short, p.open(k)), append(keys, p.open(k))
	}
	return short, keys
}

func (p fleetPage) view(pc pageContext) string {
	s := pc.styles
	if p.readAt().IsZero() {
		return s.Dim.Render("  loading the fleet ...") + "\n"
	}
	now := pc.asOf
	f := p.fleet
	var b strings.Builder
	header := func(text string) { b.WriteString(s.Header.Render(clip(text, pc.width)) + "\n") }
	none := func() { b.WriteString(s.Dim.Render("  none") + "\n") }

	// The items the cursor moves over: halts first, then rollouts.
	var halts, rows []int
	for i, it := range p.rows {
		if it.halt != nil {
			halts = append(halts, i)
		} else {
			rows = append(rows, i)
		}
	}
	header(fmt.Sprintf("  HALTS (%d)", len(f.GetHalts())))
	if len(f.GetHalts()) == 0 {
		none()
	}
	if len(halts) > 0 {
		cols := []column{{header: ""}, {header: "HALT", numeric: true}, {header: "SCOPE"}, {header: "BY"}, {header: "SINCE", min: 8},
			{header: "HOLDING", numeric: true}, {header: "REASON", elide: true}}
		cells := make([][]string, len(halts))
		for j, i := range halts {
			h := p.rows[i].halt
			cells[j] = []string{pc.marker(), fmt.Sprintf("#%d", h.GetId()), clip(ScopeText(h.GetScope()), 24), clip(h.GetActor(), 12),
				ago(now, h.GetCreatedAt().AsTime()), fmt.Sprint(h.GetHolding()), Clean(h.GetReason())}
		}
		lines := tableLines(cols, cells, pc.width)
		for j, i := range halts {
			b.WriteString(pc.rowStyle(lines[j+1], i == p.cursor, s.Bad) + "\n")
		}
	}
	b.WriteString("\n")
	header(fmt.Sprintf("  FREEZE WINDOWS (%d)", len(f.GetWindows())))
	if len(f.GetWindows()) == 0 {
		none()
	}
	for _, w := range f.GetWindows() {
		style := s.Plain
		if w.GetClosed() {
			style = s.Warn
		}
		line := fmt.Sprintf("  %s  %s  %s  %s", Clean(w.GetName()), ScopeText(w.GetScope()), WindowWhen(w), WindowState(w))
		if w.GetReason() != "" {
			line += ": " + Clean(w.GetReason())
		}
		b.WriteString(pc.rowStyle(elide(line, pc.width), false, style) + "\n")
	}
	b.WriteString("\n")
	header(fmt.Sprintf("  PACING BOUNDS (%d)", len(f.GetBounds())))
	if len(f.GetBounds()) == 0 {
		none()
	}
	for _, bound := range f.GetBounds() {
		what := "rollouts in flight"
		if bound.GetScope().GetRegion() != "" {
			what = "first waves in progress"
		}
		line := fmt.Sprintf("  %s  %s %d/%d, %d queued", ScopeText(bound.GetScope()), what, bound.GetInUse(), bound.GetMax(), bound.GetQueued())
		b.WriteString(pc.rowStyle(clip(line, pc.width), false, s.Plain) + "\n")
	}
	b.WriteString("\n")
	header(fmt.Sprintf("  IN FLIGHT (%d)", len(f.GetRollouts())))
	for _, env := range FleetEnvironments(f.GetRollouts()) {
		b.WriteString(pc.rowStyle(clip("  "+Clean(env.Name)+": "+env.Counts(), pc.width), false, s.Plain) + "\n")
	}
	cols := []column{{header: ""}, {header: "ENVIRONMENT"}, {header: "REGION"}, {header: "STATE"}, {header: "DEPLOYMENT"}, {header: "WAVE"},
		{header: "HELD", elide: true}}
	cells := make([][]string, len(rows))
	for j, i := range rows {
		row := p.rows[i].row
		r := row.Rollout
		held := HoldOf(r)
		if held == "" {
			held = "-"
		}
		cells[j] = []string{pc.marker(), clip(row.Environment, 20), clip(row.Region, 14), clip(r.GetState(), 11), clip(r.GetDeploymentId(), 18),
			fmt.Sprintf("%d/%d", r.GetWave(), len(r.GetStrategy().GetWaves())), Clean(held)}
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("rollouts", pc.filter, len(f.GetRollouts()), "no rollouts in flight")) + "\n")
	}
	for j, i := range rows {
		b.WriteString(pc.rowStyle(lines[j+1], i == p.cursor, fleetStyle(s, p.rows[i].row.Rollout)) + "\n")
	}
	// The selected rollout's hold, whole: its row has no room for it.
	if it := p.selected(); it.row != nil && HoldOf(it.row.Rollout) != "" {
		b.WriteString("\n" + pc.rowStyle(indented("  held: ", HoldOf(it.row.Rollout), pc.width, 2), false, s.Warn) + "\n")
	}
	return b.String()
}

// fleetStyle is how a rollout's row looks on the fleet page: a warning
// while something holds it.
func fleetStyle(s Styles, r *ctrlv1.Rollout) lipgloss.Style {
	if r.GetHeld() != "" || r.GetState() == rolloutQueued {
		return s.Warn
	}
	return rolloutStyle(s, r.GetState())
}

// haltScope is a scope a halt may have, named for people.
type haltScope struct {
	name  string
	scope *ctrlv1.FleetScope
}

// rolloutScopes are the scopes a halt from a rollout may have: its
// environment, and the region it is shown under (or those of its current
// wave).
func rolloutScopes(r *ctrlv1.Rollout, region string) []haltScope {
	var out []haltScope
	if r.GetEnvironmentId() != "" {
		out = append(out, haltScope{"environment " + Clean(EnvironmentOf(r)),
			&ctrlv1.FleetScope{WorkspaceId: r.GetWorkspaceId(), EnvironmentId: r.GetEnvironmentId()}})
	}
	regions := []string{region}
	if region == "" || region == "-" {
		regions = currentRegions(r)
	}
	for _, reg := range regions {
		out = append(out, haltScope{"region " + Clean(reg), &ctrlv1.FleetScope{Region: reg}})
	}
	return out
}

// pausedBy counts the rollouts progressing now (as last read) that a
// halt of scope would pause: in its environment, or whose current or
// next wave has its region; every one for everywhere.
func pausedBy(scope *ctrlv1.FleetScope, rollouts []*ctrlv1.Rollout) int {
	n := 0
	for _, r := range rollouts {
		if r.GetState() != rolloutProgressing || r.GetBreakGlassBy() != "" {
			continue
		}
		switch {
		case scope.GetRegion() != "":
			for _, reg := range r.GetRegions() {
				if reg.GetRegion() == scope.GetRegion() && (reg.GetWave() == r.GetWave() || reg.GetWave() == r.GetWave()+1) {
					n++
					break
				}
			}
		case scope.GetEnvironmentId() != "":
			if r.GetWorkspaceId() == scope.GetWorkspaceId() && r.GetEnvironmentId() == scope.GetEnvironmentId() {
				n++
			}
		default:
			n++
		}
	}
	return n
}

// haltConfirmation asks for a halt's scope (everywhere, or one of
// scopes) and its reason, which ctrld requires and audits, then halts.
// rollouts are those in flight as last read, to say how many it pauses;
// nil when the page did not read them.
func (pc pageContext) haltConfirmation(scopes []haltScope, rollouts []*ctrlv1.Rollout) *confirmation {
	scopes = append([]haltScope{{"everywhere", &ctrlv1.FleetScope{}}}, scopes...)
	names := make([]string, len(scopes))
	for i, sc := range scopes {
		names[i] = sc.name
		if rollouts != nil {
			names[i] += fmt.Sprintf(" (pauses %d progressing now)", pausedBy(sc.scope, rollouts))
		}
	}
	what := "halt rollouts"
	detail := "Halt rollouts?\nEvery rollout progressing in the scope you choose pauses, each marked with the halt (a region's: those whose " +
		"current or next wave has it), and no wave there starts until the halt is lifted (F, then p on it); rollouts made meanwhile " +
		"wait, queued. Scale, start and stop stay immediate."
	f := &form{choices: names, fields: []formField{newFormField("reason", needed("a reason"), pc.styles.plain)}}
	f.focused(0)
	f.submit = func(chosen int, values []string) tea.Cmd {
		sc := scopes[chosen]
		return actSaying(what, func(ctx context.Context) (string, error) {
			resp, err := pc.op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Scope: sc.scope, Reason: strings.TrimSpace(values[0])})
			h := resp.GetHalt()
			return fmt.Sprintf("halted %s: halt #%d paused %d; lift it from the fleet page (F)", sc.name, h.GetId(), h.GetPaused()), err
		})
	}
	return &confirmation{what: what, detail: detail, form: f}
}

// liftConfirmation asks before lifting a halt, then resumes the
// rollouts it paused.
func (pc pageContext) liftConfirmation(h *ctrlv1.FleetHalt) *confirmation {
	what := fmt.Sprintf("lift halt #%d", h.GetId())
	return &confirmation{
		what: what,
		detail: fmt.Sprintf("Lift halt #%d (%s, by %s: %s)?\nThe rollouts it paused go on, each wave's clock starting again, and waves in its scope may start "+
			"(it holds %d now); one another standing halt covers stays paused by that one, and one an operator paused stays paused.",
			h.GetId(), ScopeText(h.GetScope()), Clean(h.GetActor()), Clean(h.GetReason()), h.GetHolding()),
		run: actSaying(what, func(ctx context.Context) (string, error) {
			resp, err := pc.op.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{HaltId: h.GetId()})
			done := fmt.Sprintf("lifted halt #%d: resumed %d", h.GetId(), resp.GetResumed())
			if resp.GetStillHeld() > 0 {
				done += fmt.Sprintf(", %d still held by another halt", resp.GetStillHeld())
			}
			return done, err
		}),
	}
}

// breakGlassConfirmation asks the operator to type the deployment's name
// and a reason before taking its rollout through the fleet's holds,
// fenced by the rollout as shown (see controlConfirmation).
func (p rolloutPage) breakGlassConfirmation(pc pageContext) *confirmation {
	r, id := p.rollout, p.id
	fence := fenceOf(r)
	shownID := Clean(id)
	what := "break glass for the rollout of " + shownID
	lines := []string{fmt.Sprintf("Break glass for the rollout of %s?", shownID)}
	if held := HoldOf(r); held != "" {
		lines = append(lines, "Now: "+Clean(held)+".")
	}
	lines = append(lines, "It goes through every fleet hold: a queued one starts its first wave now, one a halt paused goes on, and no halt, "+
		"freeze window or pacing bound stops its later waves. Its own gates still hold it: a failing wave still rolls back. "+
		"Audited with your reason, and shown on the rollout.")
	f := &form{fields: []formField{
		newFormField("type the deployment's name ("+shownID+")", typed(id), pc.styles.plain),
		newFormField("reason", needed("a reason"), pc.styles.plain),
	}}
	f.focused(0)
	f.submit = func(_ int, values []string) tea.Cmd {
		return actSaying(what, func(ctx context.Context) (string, error) {
			resp, err := pc.op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS,
				Fence: fence, Reason: values[1]})
			got := resp.GetRollout()
			return fmt.Sprintf("broke glass for the rollout of %s: now %s, wave %d of %d", shownID, got.GetState(), got.GetWave(),
				len(got.GetStrategy().GetWaves())), err
		})
	}
	return &confirmation{what: what, detail: strings.Join(lines, "\n"), form: f}
}

// heldLines are the lines a rollout's page (and the rollouts page, for
// the selected one) adds for the fleet's holds: what holds it, the halt
// that paused it, a break-glass.
func heldLines(r *ctrlv1.Rollout) []string {
	var out []string
	if r.GetHeld() != "" && r.GetHeld() != r.GetReason() { // a halt's pause says it as the reason
		held := r.GetHeld()
		if r.GetState() == rolloutQueued && r.GetHeldKind() != "pacing" { // pacing's says "queued, 2nd in line"
			held = "queued: " + held
		}
		out = append(out, "held: "+held)
	}
	if haltedByFleet(r) {
		out = append(out, fmt.Sprintf("halt: #%d holds it; lift it on the fleet page (F, p), or break glass (B) for this one", r.GetHaltId()))
	}
	if r.GetBreakGlassBy() != "" {
		out = append(out, "break-glass: by "+r.GetBreakGlassBy()+": "+r.GetBreakGlassReason())
	}
	return out
}

// haltedByFleet tells whether a fleet halt holds r paused: an operator's
// resume is refused then.
func haltedByFleet(r *ctrlv1.Rollout) bool {
	return r.GetHaltId() != 0 && r.GetBreakGlassBy() == "" && r.GetState() == rolloutPaused
}
