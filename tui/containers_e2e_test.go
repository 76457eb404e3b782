package tui_test

import (
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// withSidecar makes each pod of a's two containers, the sidecar first (as
// a pod's spec may list them) and running, the app crash-looping.
func withSidecar(a *standInAgent) *standInAgent {
	for _, pod := range a.pods {
		pod.Containers = append([]*ctrlv1.LiveContainer{{Name: "log-shipper", Ready: true, State: "running"}}, pod.Containers...)
	}
	return a
}

// Against a real ctrld and a stand-in agent: l on a pod of two containers
// asks which one, listing the crashed app before the running sidecar the
// pod lists first; enter on it opens the app's log (the agent is asked
// for that container, not left to take the first), p its crashed run;
// esc returns to the pods, not to the question. Down and enter picks the
// sidecar instead.
func TestLogsOfAPodOfSeveralContainersAskWhichOne(t *testing.T) {
	env, op := liveEnv(t)
	agent := withSidecar(crashLooping("api")).start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(enter)
	c.shows(5*time.Second, "pods of api in eu-west", "api-0 Running 1/2")
	c.press(press('l'))
	got := c.shows(5*time.Second, "log of api-0 (api in eu-west): which container?", "2 containers, the crashed first")
	if app, sidecar := strings.Index(got, "app not ready"), strings.Index(got, "log-shipper ready"); app < 0 || sidecar < 0 || app > sidecar {
		t.Fatalf("the picker does not list the crashed app before the sidecar:\n%s", c.m.Content())
	}
	if logs := agent.asked("logs"); len(logs) != 0 {
		t.Fatalf("l on a pod of two containers read a log before one was picked: %v", logs)
	}
	c.press(enter)
	c.shows(5*time.Second, "log of api-0 container app", "container app · current run", "listening on :8080")
	c.press(press('p'))
	c.shows(5*time.Second, "panic: DATABASE_URL is not set")
	logs := agent.asked("logs")
	if len(logs) != 2 || logs[0].Container != "app" || logs[1].Container != "app" || !logs[1].Previous {
		t.Fatalf("the agent was asked for %v; want app's current run, then its previous one", logs)
	}
	c.press(esc)
	c.shows(5*time.Second, "pods of api in eu-west", "api-0 Running 1/2")
	c.press(press('l'))
	c.shows(5*time.Second, "which container?")
	c.press(press('j'), enter)
	c.shows(5*time.Second, "log of api-0 container log-shipper", "container log-shipper · current run", "listening on :8080")
	if logs := agent.asked("logs"); logs[len(logs)-1].Container != "log-shipper" {
		t.Fatalf("picking the sidecar asked the agent for %v", logs[len(logs)-1])
	}
}

// A pod of one container opens its log at once, as before: no question.
func TestLogsOfAPodOfOneContainerOpenAtOnce(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api").start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(enter)
	c.shows(5*time.Second, "api-0 Running 0/1")
	c.press(press('l'))
	got := c.shows(5*time.Second, "log of api-0 (api in eu-west)", "app container · current run", "listening on :8080")
	if strings.Contains(got, "which container") {
		t.Errorf("a pod of one container asked which:\n%s", c.m.Content())
	}
	if logs := agent.asked("logs"); len(logs) != 1 || logs[0].Container != "" {
		t.Errorf("the agent was asked for %v; want the pod's log, its container left to the agent", logs)
	}
}

// On the pods page, `:logs ` and tab offers the log of each pod shown
// (the deployment, the region and the pod), before the other
// deployments; tab again the next pod; enter opens that pod's log. With
// the deployment and region typed, tab completes the pod; typed for
// another region, it offers none of these pods. `:events ` and `:pods `
// offer the deployment and region shown.
func TestLogsCommandCompletesThePodsShown(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api").start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(enter)
	c.shows(5*time.Second, "pods of api in eu-west", "api-1 Running")

	for typedText, want := range map[string][]string{
		"logs ":             {":logs api eu-west api-0", ":logs api eu-west api-1", ":logs api"},
		"logs api eu-west ": {":logs api eu-west api-0", ":logs api eu-west api-1"},
		"logs api us-east ": {":logs api us-east "}, // nothing completes: its pods are not shown
		// :pods and :events offer the deployment and region shown.
		"events ": {":events api eu-west", ":events api"},
		"pods ":   {":pods api eu-west", ":pods api"},
	} {
		c.press(press(':'))
		c.press(typed(typedText)...)
		c.settle(100 * time.Millisecond) // the deployments, read as the line opens
		var got []string
		for range want {
			c.press(tab)
			got = append(got, promptLine(&c.m))
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf(":%s<tab>... reads %q, want %q", typedText, got, want)
		}
		c.press(esc)
	}

	c.press(press(':'))
	c.press(typed("logs ")...)
	c.press(tab, tab, enter)
	c.shows(5*time.Second, "log of api-1 (api in eu-west)", "listening on :8080")
	if logs := agent.asked("logs"); len(logs) != 1 || logs[0].Pod != "api-1" {
		t.Errorf("the agent was asked for %v; want api-1's log", logs)
	}
}
