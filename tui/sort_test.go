package tui_test

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// shownRows is the table rows of content, in order, each as the first
// two of its cells that name what it shows (the marker column skipped):
// "ap-south" for a region, "api/eu-west" for a deployment in a region.
func shownRows(content string, names []string, cells int) []string {
	var out []string
	for _, l := range strings.Split(ansi.Strip(content), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "!" || f[0] == "?") {
			f = f[1:]
		}
		for _, n := range names {
			if len(f) >= cells && f[0] == n {
				out = append(out, strings.Join(f[:cells], "/"))
			}
		}
	}
	return out
}

// o cycles the column the regions and the deployments are sorted by, back
// to ctrld's order after the last; O reverses. The header marks the sort
// column; numbers sort as numbers (lag 3 before 42), and rows equal in
// the sort column keep ctrld's order in either direction.
func TestSortByColumn(t *testing.T) {
	o, O := press('o'), press('O')
	for _, tc := range []struct {
		name         string
		deployments  bool
		keys         []tea.KeyPressMsg
		header, want string
	}{
		{"regions as ctrld sends them", false, nil, "REGION ", "ap-south,us-east,eu-west"},
		{"regions by name", false, []tea.KeyPressMsg{o}, "REGION▲", "ap-south,eu-west,us-east"},
		{"regions by lag, as numbers", false, []tea.KeyPressMsg{o, o}, "LAG▲", "eu-west,us-east,ap-south"},
		{"regions by lag, reversed", false, []tea.KeyPressMsg{o, o, O}, "LAG▼", "ap-south,us-east,eu-west"},
		{"regions by pending", false, []tea.KeyPressMsg{o, o, o, o}, "PEND▲", "eu-west,us-east,ap-south"},
		{"regions back to ctrld's order", false, []tea.KeyPressMsg{o, o, o, o, o, o}, "REGION ", "ap-south,us-east,eu-west"},
		{"deployments as ctrld sends them", true, nil, "DESIRED ", "api/eu-west,api/us-east,batch/ap-south"},
		{"deployments by desired status, stable", true, []tea.KeyPressMsg{o, o, o}, "DESIRED▲", "api/eu-west,batch/ap-south,api/us-east"},
		{"deployments by desired status, reversed, stable", true, []tea.KeyPressMsg{o, o, o, O}, "DESIRED▼", "api/us-east,api/eu-west,batch/ap-south"},
		{"deployments by replicas, as numbers", true, []tea.KeyPressMsg{o, o, o, o}, "REPL▲", "batch/ap-south,api/eu-west,api/us-east"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := start(t, &fakeOperator{}, 80, 24)
			waitFor(t, tm, "eu-west")
			names, cells := []string{"ap-south", "us-east", "eu-west"}, 1
			if tc.deployments {
				keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
				waitFor(t, tm, "WORKFLOW")
				names, cells = []string{"api", "batch"}, 2
			}
			keys(tm, tc.keys...)
			got := finalContent(t, tm) // the keys are handled before the quit
			if rows := strings.Join(shownRows(got, names, cells), ","); rows != tc.want || !strings.Contains(got, tc.header) {
				t.Errorf("rows %s, want %s under a header with %q:\n%s", rows, tc.want, tc.header, got)
			}
		})
	}
}

// Every table stays within the window, at 80 columns and narrower, sorted
// or not (the sort mark widens its header): the last column gives way
// first, cut with "…". (The help line is help.Model's, left out.)
func TestTablesFitTheWidth(t *testing.T) {
	for _, width := range []int{80, 60, 40, 30} {
		c := newConsole(t, &fakeOperator{}, width)
		check := func(page string) {
			t.Helper()
			lines := strings.Split(ansi.Strip(c.m.Content()), "\n")
			for _, l := range lines[:len(lines)-1] {
				if w := ansi.StringWidth(l); w > width {
					t.Errorf("%s at %d columns: a line of %d: %q", page, width, w, l)
				}
			}
		}
		check("regions")
		c.press(press('o'), press('o'), press('O'))
		check("regions, by lag")
		c.press(down) // us-east, with a sentinel and a policy
		c.turn(enter)
		check("region")
		c.press(tea.KeyPressMsg{Code: tea.KeyEscape})
		c.turn(tea.KeyPressMsg{Code: tea.KeyTab})
		check("deployments")
		c.press(press('o'), press('o'), press('o'), press('o'), press('o'))
		check("deployments, by ready")
		c.turn(press('h'))
		check("history")
	}
}
