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
	}
	b.WriteString(s.Title.Render(title) + "\n")
	if m.filtering || m.filter != "" {
		cursor := ""
		if m.filtering {
			cursor = "▏ (enter: keep, esc: clear)"
		}
		b.WriteString("filter: " + Clean(m.filter) + cursor + "\n")
	}
	if m.err != nil {
		b.WriteString(s.Banner.Render(clip(" ctrld unreachable, retrying: "+ErrorText(m.err)+" ", m.width)) + "\n")
	}
	b.WriteString("\n")
	switch m.page {
	case pageRegions:
		b.WriteString(m.renderRegions())
	case pageRegion:
		b.WriteString(m.renderDetail())
	case pageDeployments:
		b.WriteString(m.renderDeployments())
	}
	if m.confirm != nil {
		// Wrapped to fit the screen, border included.
		dialog := s.Dialog.Width(min(m.width-4, 76)).Render(m.confirm.detail + "\n\n[y] yes   [n] no")
		b.WriteString("\n" + lipgloss.NewStyle().MarginLeft(2).Render(dialog) + "\n")
	}
	if m.status != "" {
		b.WriteString("\n" + clip(m.status, m.width) + "\n")
	}
	b.WriteString("\n" + s.Help.Render(m.help.View(m.keys.helpFor(m.page))))
	return b.String()
}
