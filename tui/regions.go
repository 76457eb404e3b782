package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// regionsPage is the home view: one row per region, worst lag first (the
// server's order).
type regionsPage struct {
	all []*ctrlv1.RegionOverview
	list[*ctrlv1.RegionOverview]
}

func (p *regionsPage) set(all []*ctrlv1.RegionOverview, filter string) {
	p.all = all
	var rows []*ctrlv1.RegionOverview
	for _, r := range all {
		if strings.Contains(r.Region, filter) {
			rows = append(rows, r)
		}
	}
	p.show(rows, func(r *ctrlv1.RegionOverview) string { return r.Region })
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

func (m Model) renderRegions() string {
	s := m.styles
	now := m.opts.Now()
	var b strings.Builder
	header := fmt.Sprintf("  %-12s %-10s %7s %7s %5s %6s %4s %-8s %s", "REGION", "AGENT", "HEAD", "ACKED", "LAG", "LAG(s)", "PEND", "FULLSYNC", "STATE")
	b.WriteString(s.Header.Render(header) + "\n")
	if len(m.regions.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("regions", m.filter, len(m.regions.all), "no regions yet (ctrld token create --region R registers one)")) + "\n")
	}
	for i, r := range m.regions.rows {
		agent := "down"
		if r.AgentConnected {
			agent = "up"
			if r.ConnectedSince != nil {
				agent = "up " + ago(now, r.ConnectedSince.AsTime())
			}
		}
		fullSync := "never"
		if r.LastFullSync != nil {
			fullSync = ago(now, r.LastFullSync.AsTime())
		}
		state := "ok"
		marker := " "
		if p := problems(r); len(p) > 0 {
			state, marker = strings.Join(p, ","), "!"
		}
		line := fmt.Sprintf("%s %-12s %-10s %7d %7d %5d %6.1f %4d %-8s %s", marker, clip(r.Region, 12), clip(agent, 10),
			r.HeadVersion, r.AckedVersion, r.LagChanges, r.LagSeconds, r.PendingResources, clip(fullSync, 8), state)
		line = clip(line, m.width)
		switch {
		case i == m.regions.cursor:
			line = s.Selected.Render(line)
		case marker == "!" && !r.AgentConnected:
			line = s.Bad.Render(line)
		case marker == "!":
			line = s.Warn.Render(line)
		}
		b.WriteString(line + "\n")
	}
	if r := m.regions.selected(); r != nil && r.LastError != "" {
		b.WriteString("\n" + s.Bad.Render("last error ("+Clean(r.Region)+"): ") + clip(r.LastError, m.width-20) + "\n")
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
