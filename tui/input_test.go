package tui_test

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/deploysync/deploysync/tui"
)

// The filter and the command line take at most tui.MaxInput characters:
// beyond it keys are dropped (a paste of 32 KB into "/" would otherwise
// re-filter every list with an ever longer filter, key by key).
func TestTheFilterAndTheCommandLineAreCapped(t *testing.T) {
	m, keys := commandConsole(t, tui.Options{})
	keys(press('/'))
	keys(typed(strings.Repeat("x", tui.MaxInput) + "yyy")...)
	if got := m.Content(); !strings.Contains(got, "filter: "+strings.Repeat("x", tui.MaxInput)) || strings.Contains(got, "xy") {
		t.Errorf("the filter after %d characters and yyy:\n%s", tui.MaxInput, got)
	}
	keys(tea.KeyPressMsg{Code: tea.KeyBackspace}, press('é'))
	if got := m.Content(); !strings.Contains(got, "filter: "+strings.Repeat("x", tui.MaxInput-1)+"é") {
		t.Errorf("backspace at the cap, then é:\n%s", got)
	}
	keys(tea.KeyPressMsg{Code: tea.KeyBackspace}, press('y')) // é is one character, two bytes
	if got := m.Content(); !strings.Contains(got, "filter: "+strings.Repeat("x", tui.MaxInput-1)+"y") {
		t.Errorf("backspace after é, then y:\n%s", got)
	}
	keys(tea.KeyPressMsg{Code: tea.KeyEscape}, press(':'))
	keys(typed(strings.Repeat("x", tui.MaxInput) + "yyy")...)
	if got := promptLine(m); !strings.HasSuffix(got, "xxxx") || strings.Contains(got, "y") {
		t.Errorf("the command line after %d characters and yyy shows %q", tui.MaxInput, got)
	}
}
