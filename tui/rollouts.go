package tui

import (
	"context"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// rolloutsShown is how many rollouts the rollouts page reads: those in
// flight first, then the newest that ended.
const rolloutsShown = 50

// rolloutsMsg is a read of the rollouts.
type rolloutsMsg struct{ rollouts []*ctrlv1.Rollout }

// rolloutsPage is a home page: the rollouts in flight first, then the
// newest that ended (ctrld's order), each opening its rollout's page;
// the selected one's reason and what comes next show below them.
type rolloutsPage struct {
	all                   []*ctrlv1.Rollout
	list[*ctrlv1.Rollout] // filtered by deployment, state or image
}

func (p *rolloutsPage) set(all []*ctrlv1.Rollout, filter string) {
	p.all = all
	var rows []*ctrlv1.Rollout
	for _, r := range all {
		if strings.Contains(r.GetDeploymentId(), filter) || strings.Contains(r.GetState(), filter) || strings.Contains(r.GetToImage(), filter) {
			rows = append(rows, r)
		}
	}
	p.show(rows, func(r *ctrlv1.Rollout) string { return fmt.Sprintf("%s/%d", r.GetDeploymentId(), r.GetRevision()) })
}

func (rolloutsPage) title() string { return "rollouts" }

func (rolloutsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: rolloutsShown})
		return rolloutsMsg{r.GetRollouts()}, err
	}
}

func (p rolloutsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := msg.(rolloutsMsg)
	if !ok {
		return p, false
	}
	p.at = pc.now
	p.set(r.rollouts, pc.filter)
	return p, true
}

func (p rolloutsPage) filter(f string) page {
	p.set(p.all, f)
	return p
}

// open is Open with this page's words.
func (rolloutsPage) open(k KeyMap) key.Binding {
	b := k.Open
	b.SetHelp("enter", "open rollout")
	return b
}

func (p rolloutsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	if p.moveKey(msg, pc.keys) || p.readAt().IsZero() {
		return p, action{}
	}
	if key.Matches(msg, pc.keys.Halt) {
		// Everywhere, or the selected rollout's environment or regions.
		var scopes []haltScope
		if r := p.selected(); r != nil && inFlight(r.GetState()) {
			scopes = rolloutScopes(r, "")
		}
		return p, action{confirm: pc.haltConfirmation(scopes, p.inFlight())}
	}
	if p.selected() == nil {
		return p, action{}
	}
	if key.Matches(msg, p.open(pc.keys)) {
		return p, action{open: rolloutPage{id: p.selected().GetDeploymentId()}}
	}
	return p, action{}
}

func (p rolloutsPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Switch}, p.moveKeys(k)
	if p.selected() != nil {
		short = append(short, p.open(k))
		keys = append(keys, p.open(k))
	}
	if !p.readAt().IsZero() && k.Halt.Enabled() {
		short, keys = append(short, shortly(k.Halt, "halt")), append(keys, k.Halt)
	}
	return short, keys
}

// inFlight is the rollouts read that are in flight, for a halt's counts.
func (p rolloutsPage) inFlight() []*ctrlv1.Rollout {
	out := []*ctrlv1.Rollout{}
	for _, r := range p.all {
		if inFlight(r.GetState()) {
			out = append(out, r)
		}
	}
	return out
}

func (p rolloutsPage) view(pc pageContext) string {
	s := pc.styles
	now := pc.asOf
	cols := []column{{header: ""}, {header: "DEPLOYMENT"}, {header: "REVISION"}, {header: "STATE"}, {header: "WAVE"}, {header: "STARTED", min: 8},
		{header: "IMAGE", elide: true}}
	cells := make([][]string, len(p.rows))
	for i, r := range p.rows {
		cells[i] = []string{pc.marker(), clip(r.GetDeploymentId(), 18), fmt.Sprintf("%d -> %d", r.GetFromRevision(), r.GetRevision()),
			clip(r.GetState(), 11), fmt.Sprintf("%d/%d", r.GetWave(), len(r.GetStrategy().GetWaves())), ago(now, r.GetCreatedAt().AsTime()),
			Clean(r.GetToImage())}
	}
	lines := tableLines(cols, cells, pc.width)
	var b strings.Builder
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("rollouts", pc.filter, len(p.all),
			"no rollouts yet: changes roll out in waves once a strategy is set (unkey-tui rollout strategy set)")) + "\n")
	}
	for i, r := range p.rows {
		b.WriteString(pc.rowStyle(lines[i+1], i == p.cursor, rolloutStyle(s, r.GetState())) + "\n")
	}
	// The selected one's story, which its row has no room for.
	if r := p.selected(); r != nil {
		b.WriteString("\n")
		if r.GetReason() != "" {
			b.WriteString(pc.rowStyle(indented("  why: ", r.GetReason(), pc.width, 2), false, rolloutStyle(s, r.GetState())) + "\n")
		}
		for _, held := range heldLines(r) {
			b.WriteString(pc.rowStyle(indented("  ", held, pc.width, 2), false, s.Warn) + "\n")
		}
		b.WriteString(pc.rowStyle(indented("  next: ", r.GetNext(), pc.width, 2), false, s.Plain) + "\n")
	}
	return b.String()
}
