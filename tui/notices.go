package tui

import (
	"os"
	"path/filepath"
	"strings"

	tea "charm.land/bubbletea/v2"
)

// readNotices reads Options.Notices: one notice per file, in name order,
// its first line. Nothing when the option is unset (outside the dev stack)
// or the directory is missing or unreadable: notices are a convenience,
// never a reason to fail.
func (m Model) readNotices() tea.Cmd {
	dir := m.opts.Notices
	if dir == "" {
		return nil
	}
	return func() tea.Msg {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		var notices []string
		for _, f := range files { // Glob sorts
			data, err := os.ReadFile(f)
			if line, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n"); err == nil && line != "" {
				notices = append(notices, line)
			}
		}
		return noticesMsg{notices}
	}
}
