package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// regionsMsg is a read of every region's health.
type regionsMsg struct{ regions []*ctrlv1.RegionOverview }

// regionsPage is the home view: one row per region, worst lag first (the
// server's order) unless sorted by a column.
type regionsPage struct {
	all []*ctrlv1.RegionOverview
	list[*ctrlv1.RegionOverview]
	sort sorting // by regionSortColumns
}

// regionSortColumns are the regions table's columns it sorts by; numbers
// sort as numbers.
var regionSortColumns = []sortColumn[*ctrlv1.RegionOverview]{
	{"REGION", byString((*ctrlv1.RegionOverview).GetRegion)},
	{"LAG", byNumber((*ctrlv1.RegionOverview).GetLagChanges)},
	{"LAG(s)", byNumber((*ctrlv1.RegionOverview).GetLagSeconds)},
	{"PEND", byNumber((*ctrlv1.RegionOverview).GetPendingResources)},
	{"STATE", byString(func(r *ctrlv1.RegionOverview) string { return strings.Join(problems(r), ",") })},
}

func (p *regionsPage) set(all []*ctrlv1.RegionOverview, filter string) {
	p.all = all
	var rows []*ctrlv1.RegionOverview
	for _, r := range all {
		if strings.Contains(r.Region, filter) {
			rows = append(rows, r)
		}
	}
	sortRows(rows, regionSortColumns, p.sort)
	p.show(rows, func(r *ctrlv1.RegionOverview) string { return r.Region })
}

func (regionsPage) title() string { return "regions" }

func (regionsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		return regionsMsg{r.GetRegions()}, err
	}
}

// receive takes the regions read for this page, and those read with the
// deployments (for their confirmations): tab back shows them at once.
func (p regionsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	switch msg := msg.(type) {
	case regionsMsg:
		p.set(msg.regions, pc.filter)
	case deploymentsMsg:
		p.set(msg.regions, pc.filter)
	default:
		return p, false
	}
	p.at = pc.now
	return p, true
}

func (p regionsPage) filter(f string) page {
	p.set(p.all, f)
	return p
}

func (p regionsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	r := p.selected()
	if p.moveKey(msg, pc.keys) || r == nil {
		return p, action{}
	}
	if p.sort.key(msg, pc.keys, len(regionSortColumns)) {
		p.set(p.all, pc.filter)
		return p, action{}
	}
	switch {
	case key.Matches(msg, pc.keys.Open):
		return p, action{open: detailPage{name: r.Region}}
	case key.Matches(msg, pc.keys.Resync):
		return p, action{confirm: pc.resyncConfirmation(r.Region)}
	case key.Matches(msg, pc.keys.Pause):
		return p, action{confirm: pc.pauseConfirmation(r.Region, !r.Paused)}
	}
	return p, action{}
}

func (p regionsPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Switch}, p.moveKeys(k)
	if p.selected() != nil {
		short = append(short, k.Open, p.sort.short(k))
		keys = append(keys, k.Open, k.Resync, k.Pause)
		keys = append(keys, p.sort.keys(k)...)
	}
	return short, keys
}

// problems lists what is wrong with a region, in words.
func problems(r *ctrlv1.RegionOverview) []string {
	var out []string
	if !r.AgentConnected {
		out = append(out, "DOWN")
	}
	if r.Paused {
		out = append(out, "PAUSED")
	}
	if r.LagSeconds > 30 {
		out = append(out, "LAGGING")
	}
	if r.LastError != "" {
		out = append(out, "ERROR")
	}
	return out
}

// wideFrom is the width from which the regions table shows the HEAD and
// ACKED versions too; narrower, they give way to the state (the region's
// page shows them).
const wideFrom = 100

// downPaused says since when the region's agent is down (its last
// heartbeat) and the region paused: "DOWN since 14:02 (4m)".
func downPaused(r *ctrlv1.RegionOverview, now time.Time) []string {
	var out []string
	if !r.GetAgentConnected() {
		if s := since(r.GetLastHeartbeat(), now); s != "" {
			out = append(out, "DOWN "+s)
		} else {
			out = append(out, "DOWN, never connected")
		}
	}
	if r.GetPaused() {
		out = append(out, strings.TrimSpace("PAUSED "+since(r.GetPausedSince(), now)))
	}
	return out
}

// whyNotInSync lists why the region is not in sync, most pressing first:
// down and paused since when, then the server's other reasons (its own
// "paused" and "agent down" would say the same again), then the agent's
// last error.
func whyNotInSync(r *ctrlv1.RegionOverview, now time.Time) []string {
	why := downPaused(r, now)
	for _, reason := range r.GetNotInSync() {
		switch reason.GetCode() {
		case "paused", "agent_down", "no_agent":
			continue
		}
		why = append(why, reasonText(reason))
	}
	// The server's reasons say the agent's last error where it matters
	// (agent_error, full_sync_failing): said once. Older servers, and a
	// down agent (its reason is the DOWN line above), leave it to us.
	if e := r.GetLastError(); e != "" && !slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, e) }) {
		why = append(why, "last error: "+e)
	}
	return why
}

// regionState is the region's state in a word or a few ("ok",
// "DOWN,PAUSED"; "was …" while the data is stale), and its style.
func (pc pageContext) regionState(r *ctrlv1.RegionOverview) (string, lipgloss.Style) {
	state, style := "ok", pc.styles.Plain
	if p := problems(r); len(p) > 0 {
		state, style = strings.Join(p, ","), pc.styles.Warn
		if !r.GetAgentConnected() {
			style = pc.styles.Bad
		}
	}
	if pc.stale {
		state = "was " + state // the title says since when
	}
	return state, style
}

// agentText is the AGENT cell: up or down and for how long, since it
// connected or since its last heartbeat ("up 3m", "down 52s"). Without an
// "ago", it fits its column at any age.
func agentText(r *ctrlv1.RegionOverview, now time.Time) string {
	switch {
	case r.GetAgentConnected() && r.GetConnectedSince() != nil:
		return "up " + span(now.Sub(r.GetConnectedSince().AsTime()))
	case r.GetAgentConnected():
		return "up"
	case r.GetLastHeartbeat() != nil:
		return "down " + span(now.Sub(r.GetLastHeartbeat().AsTime()))
	}
	return "down"
}

// reasonText is one reason a region or deployment is not in sync, in the
// server's words.
func reasonText(r *ctrlv1.SyncReason) string {
	text := r.GetMessage()
	if text == "" {
		text = strings.ReplaceAll(r.GetCode(), "_", " ")
	}
	if r.GetResource() != "" && !strings.Contains(text, r.GetResource()) {
		text = r.GetResource() + ": " + text
	}
	return text
}

func (p regionsPage) view(pc pageContext) string {
	s := pc.styles
	now := pc.asOf
	wide := pc.width >= wideFrom
	h := func(header string) string { return mark(header, regionSortColumns, p.sort) }
	cols := []column{{header: ""}, {header: h("REGION")}, {header: "AGENT", min: 11}}
	if wide {
		cols = append(cols, column{header: "HEAD", numeric: true}, column{header: "ACKED", numeric: true})
	}
	cols = append(cols, column{header: h("LAG"), numeric: true}, column{header: h("LAG(s)"), numeric: true}, column{header: h("PEND"), numeric: true}, column{header: "FULLSYNC"}, column{header: h("STATE"), elide: true})
	cells := make([][]string, len(p.rows))
	styles := make([]lipgloss.Style, len(p.rows))
	for i, r := range p.rows {
		fullSync := "never"
		if r.LastFullSync != nil {
			fullSync = ago(now, r.LastFullSync.AsTime())
		}
		state, style := pc.regionState(r)
		marker := pc.marker()
		if marker == " " && len(problems(r)) > 0 {
			marker = "!"
		}
		row := []string{marker, clip(r.Region, 12), clip(agentText(r, now), 11)}
		if wide {
			row = append(row, fmt.Sprint(r.HeadVersion), fmt.Sprint(r.AckedVersion))
		}
		cells[i] = append(row, fmt.Sprint(r.LagChanges), fmt.Sprintf("%.1f", r.LagSeconds), fmt.Sprint(r.PendingResources), clip(fullSync, 8), Clean(state))
		styles[i] = style
	}
	lines := tableLines(cols, cells, pc.width)
	var b strings.Builder
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("regions", pc.filter, len(p.all), "no regions yet (ctrld token create --region R registers one)")) + "\n")
	}
	for i, line := range lines[1:] {
		b.WriteString(pc.rowStyle(line, i == p.cursor, styles[i]) + "\n")
	}
	if r := p.selected(); r != nil {
		why := whyNotInSync(r, now)
		if len(why) > 0 {
			b.WriteString("\n")
		}
		for _, w := range why {
			b.WriteString(elide(Clean(r.Region)+": "+w, pc.width) + "\n")
		}
	}
	return b.String()
}

// clip cleans s (see Clean) and shortens it to n cells, "…" last.
func clip(s string, n int) string {
	s = Clean(s)
	if n <= 1 || ansi.StringWidth(s) <= n {
		return s
	}
	return ansi.Truncate(s, n, "…")
}
