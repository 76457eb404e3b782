package tui

import (
	"strings"

	"charm.land/lipgloss/v2"
)

// render lays out title, banner, page, dialog, status and help.
func (m Model) render() string {
	s := m.styles
	var b strings.Builder
	title := "unkey-tui · " + m.shown().title()
	if m.opts.ReadOnly {
		title += " · read-only"
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
		banner := "ctrld: " + ErrorText(m.err)
		if noAnswer(m.err) {
			banner = "ctrld unreachable, retrying: " + ErrorText(m.err)
		}
		b.WriteString(s.Banner.Render(fit(banner, m.width, 2)) + "\n")
	}
	b.WriteString("\n")
	if m.confirm != nil {
		// In place of the page, which it would push off a small screen:
		// the dialog says all that will change. Wrapped to fit the screen,
		// border included.
		dialog := s.Dialog.Width(min(m.width-4, 76)).Render(m.confirm.dialog(s))
		b.WriteString(lipgloss.NewStyle().MarginLeft(2).Render(dialog) + "\n")
	} else {
		b.WriteString(m.shown().view(m.pageContext()))
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
	if m.command != nil {
		// In place of the help, k9s-like: the line the operator types on.
		b.WriteString("\n" + m.commandView())
		return b.String()
	}
	b.WriteString("\n" + s.Help.Render(m.help.View(m.shownHelp())))
	return b.String()
}
