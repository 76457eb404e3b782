package tui

import "charm.land/lipgloss/v2"

// Styles are the console's looks. Every state that matters is also spelled
// out in text ("!" markers, DOWN, PAUSED), so it reads without color.
type Styles struct {
	Title, Header, Selected, Bad, Warn, Dim, Banner, Dialog, Help, Plain lipgloss.Style
	// Removed and Added are a diff's "-" and "+" lines (the signs say it
	// without color).
	Removed, Added lipgloss.Style
	// plain is true without colors (NO_COLOR), for the widgets that style
	// themselves (a dialog's text input).
	plain bool
}

// NewStyles returns the styles; noColor drops every color (NO_COLOR).
func NewStyles(noColor bool) Styles {
	if noColor {
		plain := lipgloss.NewStyle()
		return Styles{
			Title: plain.Bold(true), Header: plain.Bold(true), Selected: plain.Reverse(true),
			Bad: plain, Warn: plain, Dim: plain, Banner: plain.Bold(true),
			Dialog: plain.Border(lipgloss.NormalBorder()).Padding(0, 1), Help: plain, Plain: plain,
			Removed: plain, Added: plain, plain: true,
		}
	}
	return Styles{
		Title:    lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12")),
		Header:   lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("7")),
		Selected: lipgloss.NewStyle().Reverse(true),
		Bad:      lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		Warn:     lipgloss.NewStyle().Foreground(lipgloss.Color("11")),
		Dim:      lipgloss.NewStyle().Foreground(lipgloss.Color("8")),
		Banner:   lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1")),
		Dialog:   lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1),
		Help:     lipgloss.NewStyle().Foreground(lipgloss.Color("8")),
		Plain:    lipgloss.NewStyle(),
		Removed:  lipgloss.NewStyle().Foreground(lipgloss.Color("1")),
		Added:    lipgloss.NewStyle().Foreground(lipgloss.Color("2")),
	}
}
