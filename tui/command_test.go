package tui_test

import (
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// commandConsole is the console on the fake operator, its first read
// done, and a way to press keys on it that runs what each key asks for
// (reads) and feeds the answers back, as the program loop would; ticks
// are left out (the first read's aside), so the screen changes only by
// the keys.
func commandConsole(t *testing.T, opts tui.Options) (m *tui.Model, press func(keys ...tea.KeyPressMsg)) {
	t.Helper()
	opts.Now = func() time.Time { return now }
	return drive(t, &fakeOperator{}, opts)
}

// drive is commandConsole on any operator client.
func drive(t *testing.T, op ctrlv1.OperatorServiceClient, opts tui.Options) (m *tui.Model, press func(keys ...tea.KeyPressMsg)) {
	t.Helper()
	opts.Refresh, opts.NoColor = time.Millisecond, true
	console := refresh(t, tui.New(op, opts))
	press = func(keys ...tea.KeyPressMsg) {
		for _, k := range keys {
			next, cmd := console.Update(k)
			console = next.(tui.Model)
			for _, msg := range results(cmd) {
				if _, quit := msg.(tea.QuitMsg); quit {
					continue
				}
				next, _ = console.Update(msg)
				console = next.(tui.Model)
			}
		}
	}
	return &console, press
}

// typed is the keys that type s.
func typed(s string) []tea.KeyPressMsg {
	var out []tea.KeyPressMsg
	for _, r := range s {
		out = append(out, press(r))
	}
	return out
}

// promptLine is the command line's text as typed or completed: the
// screen's last line up to the cursor, which is at its end after a tab
// (what follows the cursor is the next completion, faint, and room).
func promptLine(m *tui.Model) string {
	lines := strings.Split(m.Content(), "\n")
	typed, _, _ := strings.Cut(lines[len(lines)-1], "\x1b[")
	return typed
}

// ":" opens a prompt at the bottom; tab completes a command's name, then
// cycles through its argument's values (deployments read when the prompt
// opened, regions read with them), and after anything typed completes
// afresh; enter goes there, read-only or not (every command is a view).
func TestCommandModeCompletesAndGoes(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		m, keys := commandConsole(t, tui.Options{ReadOnly: readOnly})
		keys(press(':'))
		keys(typed("hi")...)
		keys(tab)
		if got := promptLine(m); got != ":history " {
			t.Fatalf("read-only %v: :hi<tab> reads %q", readOnly, got)
		}
		for _, want := range []string{":history api", ":history batch", ":history api"} {
			keys(tab)
			if got := promptLine(m); got != want {
				t.Fatalf("read-only %v: tab reads %q, want %q", readOnly, got, want)
			}
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEnter})
		if got := m.Content(); !strings.Contains(got, "history of api") || !strings.Contains(got, "WHAT CHANGED") {
			t.Fatalf("read-only %v: :history api did not open api's history:\n%s", readOnly, got)
		}

		keys(press(':'))
		keys(typed("region u")...)
		keys(tab)
		if got := promptLine(m); got != ":region us-east" {
			t.Fatalf("read-only %v: :region u<tab> reads %q", readOnly, got)
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEnter})
		if got := m.Content(); !strings.Contains(got, "region us-east") || !strings.Contains(got, "PENDING CHANGES (3)") {
			t.Fatalf("read-only %v: :region us-east did not open us-east:\n%s", readOnly, got)
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEscape}) // back to the regions, where :region went from
		if got := m.Content(); !strings.Contains(got, "unkey-tui · regions") {
			t.Fatalf("read-only %v: esc from a region opened by command:\n%s", readOnly, got)
		}

		keys(press(':'))
		keys(typed("ro")...)
		keys(tab, tab) // rollout , rollouts
		keys(tea.KeyPressMsg{Code: tea.KeyEnter})
		if got := m.Content(); !strings.Contains(got, "unkey-tui · rollouts") {
			t.Fatalf("read-only %v: :rollouts did not show the rollouts:\n%s", readOnly, got)
		}
	}
}

// A command the console does not know, or an argument it has not read,
// says so on one line above the prompt, which stays to be corrected;
// nothing else changes, and esc leaves the screen as it was.
func TestUnknownCommandSaysSoAndChangesNothing(t *testing.T) {
	m, keys := commandConsole(t, tui.Options{})
	before := m.Content()
	for _, c := range []struct{ typed, says string }{
		{"helm", `unknown command ":helm" (tab on an empty line goes through the commands)`},
		{"history nope", `:history DEPLOYMENT: unknown deployment "nope" (known: api, batch)`},
		{"region mars", `:region NAME: unknown region "mars" (known: ap-south, eu-west, us-east)`},
		{"region", "usage: :region NAME"},
		{"regions eu-west", "usage: :regions"},
	} {
		keys(press(':'))
		keys(typed(c.typed)...)
		keys(tea.KeyPressMsg{Code: tea.KeyEnter})
		got := ansi.Strip(m.Content())
		lines := strings.Split(got, "\n")
		if said := lines[len(lines)-2]; !strings.Contains(said, c.says) {
			t.Errorf(":%s says %q, want %q:\n%s", c.typed, said, c.says, got)
		}
		if !strings.HasPrefix(promptLine(m), ":"+c.typed) || !strings.Contains(got, "unkey-tui · regions") {
			t.Errorf(":%s left the prompt or the page:\n%s", c.typed, got)
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEscape})
		if got := m.Content(); got != before {
			t.Errorf(":%s then esc changed the screen:\n%s\nwas:\n%s", c.typed, got, before)
		}
	}
	keys(press(':'))
	keys(typed("zz")...)
	keys(tab)
	if got := ansi.Strip(m.Content()); !strings.Contains(got, `nothing completes ":zz"`) || promptLine(m) != ":zz" {
		t.Errorf(":zz<tab>:\n%s", got)
	}
}

// :q quits, as q does.
func TestCommandQuits(t *testing.T) {
	tm := start(t, &fakeOperator{}, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, press(':'), press('q'), enter)
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
}

// On a rollout's page, `:events ` and `:pods ` offer the deployment and
// the region selected first, as on-call looks into the region a gate
// failed in.
func TestEventsAndPodsCommandsOfferTheRolloutsSelectedRegion(t *testing.T) {
	m, keys := commandConsole(t, tui.Options{})
	keys(press(':'))
	keys(typed("rollout api")...)
	keys(tea.KeyPressMsg{Code: tea.KeyEnter})
	if got := m.Content(); !strings.Contains(got, "rollout of api") {
		t.Fatalf(":rollout api did not open api's rollout:\n%s", got)
	}
	complete := func(text string) string {
		keys(press(':'))
		keys(typed(text)...)
		keys(tab)
		got := promptLine(m)
		keys(tea.KeyPressMsg{Code: tea.KeyEscape})
		return got
	}
	if got := complete("events "); got != ":events api eu-west" {
		t.Errorf(":events <tab> on api's rollout, eu-west selected, reads %q", got)
	}
	keys(down)
	if got := complete("pods "); got != ":pods api us-east" {
		t.Errorf(":pods <tab> on api's rollout, us-east selected, reads %q", got)
	}
}
