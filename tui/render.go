package tui

import (
	"strings"

	"charm.land/lipgloss/v2"
)

// render lays out title, banner, page, dialog, status and help.
func (m Model) render() string {
	s := m.styles
	var b strings.Builder
	title := "unkey-tui · regions"
	switch m.page {
	case pageRegion:
		title = "unkey-tui · region " + Clean(m.detail.name) + "  (esc: back)"
	case pageDeployments:
		title = "unkey-tui · deployments"
	case pageHistory:
		title = "unkey-tui · history of " + Clean(m.history.id) + "  (esc: back)"
	}
	if m.stale() {
		title += " · STALE " + asOfText(m.shownAt(), m.opts.Now())
	}
	b.WriteString(s.Title.Render(clip(title, m.width)) + "\n")
	if m.filtering || m.filter != "" {
		cursor := ""
		if m.filtering {
			cursor = "▏ (enter: keep, esc: clear)"
		}
		b.WriteString("filter: " + Clean(m.filter) + cursor + "\n")
	}
	if m.err != nil {
		b.WriteString(s.Banner.Render(fit("ctrld unreachable, retrying: "+ErrorText(m.err), m.width, 2)) + "\n")
	}
	b.WriteString("\n")
	switch {
	case m.confirm != nil:
		// In place of the page, which it would push off a small screen:
		// the dialog says all that will change. Wrapped to fit the screen,
		// border included.
		dialog := s.Dialog.Width(min(m.width-4, 76)).Render(m.confirm.detail + "\n\n[y] yes   [n] no")
		b.WriteString(lipgloss.NewStyle().MarginLeft(2).Render(dialog) + "\n")
	case m.page == pageRegions:
		b.WriteString(m.renderRegions())
	case m.page == pageRegion:
		b.WriteString(m.renderDetail())
	case m.page == pageDeployments:
		b.WriteString(m.renderDeployments())
	case m.page == pageHistory:
		b.WriteString(m.renderHistory())
	}
	if m.status != "" || len(m.notices) > 0 {
		b.WriteString("\n")
	}
	for _, n := range m.notices {
		b.WriteString(s.Bad.Render(fit("dev stack: "+n, m.width, 2)) + "\n")
	}
	if m.status != "" {
		b.WriteString(fit(m.status, m.width, 2) + "\n")
	}
	b.WriteString("\n" + s.Help.Render(m.help.View(m.keys.helpFor(m.page))))
	return b.String()
}

// rowStyle marks a table row: dimmed, with "?", while the data is stale,
// so that no row reads as live when ctrld does not answer.
func (m Model) rowStyle(line string, selected bool, style lipgloss.Style) string {
	switch {
	case selected:
		return m.styles.Selected.Render(line)
	case m.stale():
		return m.styles.Dim.Render(line)
	}
	return style.Render(line)
}
