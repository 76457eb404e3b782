package tui

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// keyPress is the key event of one of a binding's keys ("enter", "k", "+").
func keyPress(t *testing.T, name string) tea.KeyPressMsg {
	t.Helper()
	named := map[string]rune{"up": tea.KeyUp, "down": tea.KeyDown, "enter": tea.KeyEnter, "esc": tea.KeyEscape,
		"backspace": tea.KeyBackspace, "tab": tea.KeyTab, "pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown, "end": tea.KeyEnd}
	msg := tea.KeyPressMsg{Code: []rune(name)[0], Text: name}
	if code, ok := named[name]; ok {
		msg = tea.KeyPressMsg{Code: code}
	}
	if msg.String() != name {
		t.Fatalf("cannot press %q: the event reads %q", name, msg.String())
	}
	return msg
}

// shownBindings is every binding the help of the shown page lists, one
// line or full.
func shownBindings(m Model) []key.Binding {
	h := m.shownHelp()
	shown := h.ShortHelp()
	for _, column := range h.FullHelp() {
		shown = append(shown, column...)
	}
	return shown
}

// acts reports whether pressing k does something: the screen changes or a
// command runs (a read, an action, quitting).
func acts(t *testing.T, m Model, k string) bool {
	t.Helper()
	next, cmd := m.Update(keyPress(t, k))
	return cmd != nil || next.(Model).Content() != m.Content()
}

// helpStates are the console on each page, loaded, empty and still
// loading, the cursor on a middle row where there are rows.
func helpStates(t *testing.T) map[string]Model {
	t.Helper()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ts := timestamppb.New(now.Add(-time.Minute))
	update := func(m Model, msgs ...tea.Msg) Model {
		for _, msg := range msgs {
			next, _ := m.Update(msg)
			m = next.(Model)
		}
		return m
	}
	var overviews []*ctrlv1.RegionOverview
	for _, r := range []string{"ap-south", "eu-west", "us-east"} {
		overviews = append(overviews, &ctrlv1.RegionOverview{Region: r, AgentConnected: true, ConnectedSince: ts})
	}
	inRegion := func(id, region string) *ctrlv1.DeploymentInRegion {
		return &ctrlv1.DeploymentInRegion{DeploymentId: id, Region: region, DesiredStatus: "running", Replicas: 2}
	}
	var deployments []*ctrlv1.DeploymentSummary
	for _, id := range []string{"api", "worker"} {
		deployments = append(deployments, &ctrlv1.DeploymentSummary{DeploymentId: id,
			Regions: []*ctrlv1.DeploymentInRegion{inRegion(id, "eu-west"), inRegion(id, "us-east")}})
	}
	region := &ctrlv1.GetRegionResponse{Overview: overviews[0],
		Deployments: []*ctrlv1.DeploymentInRegion{inRegion("api", "ap-south"), inRegion("batch", "ap-south"), inRegion("worker", "ap-south")}}
	var revisions []*ctrlv1.DeploymentRevision
	for n := int32(3); n > 0; n-- {
		revisions = append(revisions, &ctrlv1.DeploymentRevision{Revision: n, Action: "update", CreatedAt: ts,
			Image: fmt.Sprintf("ghcr.io/acme/api:v%d", n), Regions: []*ctrlv1.RegionSpec{{Region: "eu-west", Replicas: 2, Status: "running"}}})
	}
	strategy := &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu-west"}}, {Regions: []string{"us-east"}}}}
	rollout := func(id, state string) *ctrlv1.Rollout {
		return &ctrlv1.Rollout{DeploymentId: id, State: state, Wave: 1, Strategy: strategy, CreatedAt: ts, Regions: []*ctrlv1.RolloutRegion{
			{Region: "eu-west", Wave: 1, State: "progressing"}, {Region: "us-east", Wave: 2, State: "waiting"}, {Region: "ap-south", Wave: 2, State: "waiting"}}}
	}
	rollouts := []*ctrlv1.Rollout{rollout("api", "progressing"), rollout("worker", "paused"), rollout("batch", "rolled_back")}
	var (
		down, enter, tab     = keyPress(t, "down"), keyPress(t, "enter"), keyPress(t, "tab")
		history, openRollout = keyPress(t, "h"), keyPress(t, "R")
	)
	start := New(nil, Options{NoColor: true, Now: func() time.Time { return now }})
	regions := update(start, regionsMsg{overviews})
	onDeployments := update(start, tab, deploymentsMsg{deployments, overviews})
	onRegion := update(regions, enter)
	onHistory := update(onDeployments, history)
	onRollouts := update(start, tab, tab, rolloutsMsg{rollouts})
	onRollout := update(onDeployments, openRollout)
	diff := keyPress(t, "d")
	pending := &ctrlv1.ListPendingChangesResponse{Total: 7, Changes: []*ctrlv1.PendingChange{
		{Version: 986, Kind: "deployment", ResourceId: "api", CreatedAt: ts, Summary: "image api:v1 -> api:v2"},
		{Version: 988, Kind: "sentinel", ResourceId: "gw", CreatedAt: ts, Summary: "deleted"},
		{Version: 990, Kind: "deployment", ResourceId: "batch", CreatedAt: ts, Summary: "replicas 2 -> 3; env A changed"}}}
	onPending := update(onRegion, detailMsg{"ap-south", region, pending}, down)
	states := map[string]Model{
		"regions":                update(regions, down),
		"regions, none":          update(start, regionsMsg{}),
		"regions, loading":       start,
		"deployments":            update(onDeployments, down),
		"deployments, none":      update(start, tab, deploymentsMsg{nil, overviews}),
		"region":                 update(onRegion, detailMsg{"ap-south", region, &ctrlv1.ListPendingChangesResponse{}}, down),
		"region, no deployments": update(onRegion, detailMsg{"ap-south", &ctrlv1.GetRegionResponse{Overview: overviews[0]}, nil}),
		"region, loading":        onRegion,
		"history":                update(onHistory, historyMsg{"api", revisions}, down),
		"history, one revision":  update(onHistory, historyMsg{"api", revisions[:1]}),
		"history, loading":       onHistory,
		"region, pending":        onPending,
		"pending diff":           update(onPending, diff, down),
		"rollback diff":          update(onHistory, historyMsg{"api", revisions}, down, diff),
		"rollback diff, newest":  update(onHistory, historyMsg{"api", revisions}, diff),
		"rollouts":               update(onRollouts, down),
		"rollouts, none":         update(start, tab, tab, rolloutsMsg{}),
		"rollout, progressing":   update(onRollout, rolloutMsg{id: "api", rollout: rollouts[0]}, down),
		"rollout, paused":        update(onRollout, rolloutMsg{id: "api", rollout: rollouts[1]}, down),
		"rollout, halted":        update(onRollout, rolloutMsg{id: "api", rollout: rollout("api", "halted")}, down),
		"rollout, rolled back":   update(onRollout, rolloutMsg{id: "api", rollout: rollouts[2]}, down),
		"rollout, none":          update(onRollout, rolloutMsg{id: "api", none: "no rollout"}),
		"rollout, loading":       onRollout,
	}
	for name, m := range fleetHelpStates(t, start, onRollout, onHistory, update) {
		states[name] = m
	}
	for name, m := range liveHelpStates(t, onRollout, update) {
		states[name] = m
	}
	return states
}

// fleetHelpStates are the fleet page (loaded with a halt and rollouts,
// the cursor on the halt or on a rollout; empty; loading), rollouts the
// fleet holds (queued, paused by a halt, taken through by a
// break-glass), and a history with a failed revision.
func fleetHelpStates(t *testing.T, start, onRollout, onHistory Model, update func(Model, ...tea.Msg) Model) map[string]Model {
	t.Helper()
	ts := timestamppb.New(time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC))
	strategy := &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu-west"}}, {Regions: []string{"us-east"}}}}
	rollout := func(id, state string) *ctrlv1.Rollout {
		return &ctrlv1.Rollout{DeploymentId: id, State: state, Wave: 1, Strategy: strategy, CreatedAt: ts, WorkspaceId: "acme", EnvironmentId: "prod",
			Regions: []*ctrlv1.RolloutRegion{{Region: "eu-west", Wave: 1, State: "progressing"}, {Region: "us-east", Wave: 2, State: "waiting"},
				{Region: "ap-south", Wave: 2, State: "waiting"}}}
	}
	queued := rollout("api", "queued")
	queued.Held, queued.HeldKind = "frozen until Mon 09:00 CET by window weekend", "freeze"
	halted := rollout("worker", "paused")
	halted.HaltId, halted.Held, halted.Reason, halted.HeldKind = 3, "paused by halt #3 (alice: incident)", "paused by halt #3 (alice: incident)", "halt"
	glass := rollout("batch", "progressing")
	glass.BreakGlassBy, glass.BreakGlassReason = "bob", "hotfix"
	fleet := &ctrlv1.GetFleetResponse{Now: ts, Rollouts: []*ctrlv1.Rollout{queued, halted, glass},
		Halts: []*ctrlv1.FleetHalt{{Id: 3, Scope: &ctrlv1.FleetScope{}, Reason: "incident", Actor: "alice", CreatedAt: ts, Holding: 2},
			{Id: 4, Scope: &ctrlv1.FleetScope{Region: "eu-west"}, Reason: "latency", Actor: "bob", CreatedAt: ts}}}
	onFleet := update(start, keyPress(t, "F"))
	loaded := update(onFleet, fleetMsg{fleet})
	failed := []*ctrlv1.DeploymentRevision{
		{Revision: 3, Action: "rollback", CreatedAt: ts, Image: "api:v1"},
		{Revision: 2, Action: "update", CreatedAt: ts, Image: "api:v2", Failed: "eu-west: crash loop", FailedRolloutId: 7},
		{Revision: 1, Action: "deploy", CreatedAt: ts, Image: "api:v1"},
	}
	return map[string]Model{
		"fleet, on a halt":         update(loaded, keyPress(t, "down")),
		"fleet, on a rollout":      update(loaded, keyPress(t, "down"), keyPress(t, "down")),
		"fleet, none":              update(onFleet, fleetMsg{&ctrlv1.GetFleetResponse{Now: ts}}),
		"fleet, loading":           onFleet,
		"rollout, queued":          update(onRollout, rolloutMsg{id: "api", rollout: queued}, keyPress(t, "down")),
		"rollout, halted by fleet": update(onRollout, rolloutMsg{id: "api", rollout: halted}, keyPress(t, "down")),
		"rollout, break-glass":     update(onRollout, rolloutMsg{id: "api", rollout: glass}, keyPress(t, "down")),
		"history, failed":          update(onHistory, historyMsg{"api", failed}, keyPress(t, "down")),
		"history, failed only":     update(onHistory, historyMsg{"api", failed[1:2]}),
	}
}

// repeat is n presses of k.
func repeat(k tea.KeyPressMsg, n int) []tea.Msg {
	out := make([]tea.Msg, n)
	for i := range out {
		out[i] = k
	}
	return out
}

// liveHelpStates are the live pages, opened from a halted rollout's
// failed region: loaded, empty, loading and refused, the cursor on a
// middle row, a log scrolled to its middle or at its newest line.
func liveHelpStates(t *testing.T, onRollout Model, update func(Model, ...tea.Msg) Model) map[string]Model {
	t.Helper()
	halted := &ctrlv1.Rollout{DeploymentId: "api", State: "halted", Wave: 1, Regions: []*ctrlv1.RolloutRegion{
		{Region: "eu-west", Wave: 1, State: "failed"}, {Region: "us-east", Wave: 2, State: "waiting"}}}
	var pods []*ctrlv1.LivePod
	var events []*ctrlv1.LiveEvent
	for i := range 3 {
		name := fmt.Sprintf("api-%d", i)
		pods = append(pods, &ctrlv1.LivePod{Name: name, Phase: "Running", Restarts: 3, Why: "CrashLoopBackOff",
			Containers: []*ctrlv1.LiveContainer{{Name: "app", TerminationMessage: "panic: DATABASE_URL is not set"}}})
		events = append(events, &ctrlv1.LiveEvent{Object: "Pod " + name, Type: "Warning", Reason: "BackOff", Count: 4, Message: "Back-off restarting failed container"})
	}
	gone := status.Error(codes.Unavailable, "region eu-west: its agent is not connected for live views")
	var log strings.Builder
	for i := range 100 {
		fmt.Fprintf(&log, "line %d\n", i)
	}
	down, up := keyPress(t, "down"), keyPress(t, "up")
	onPods := update(onRollout, rolloutMsg{id: "api", rollout: halted}, keyPress(t, "enter"))
	loaded := update(onPods, podsMsg{id: "api", region: "eu-west", pods: pods}, down)
	onLogs := update(loaded, keyPress(t, "l"))
	stream := func(m Model) *logStream { return m.opened.(logsPage).stream }
	withLog := update(onLogs, logsMsg{stream: stream(onLogs), text: log.String()})
	onPrevious := update(withLog, keyPress(t, "p"))
	onEvents := update(loaded, keyPress(t, "e"))
	return map[string]Model{
		"pods":                   loaded,
		"pods, none":             update(onPods, podsMsg{id: "api", region: "eu-west"}),
		"pods, loading":          onPods,
		"pods, agent gone":       update(onPods, podsMsg{id: "api", region: "eu-west", err: gone}),
		"pods, agent gone since": update(loaded, podsMsg{id: "api", region: "eu-west", err: gone}),
		"events":                 update(onEvents, eventsMsg{id: "api", region: "eu-west", events: events}, down),
		"events, loading":        onEvents,
		"events, agent gone":     update(onEvents, eventsMsg{id: "api", region: "eu-west", err: gone}),
		"logs, loading":          onLogs,
		"logs, at the newest":    withLog,
		"logs, scrolled up":      update(withLog, repeat(up, 40)...),
		"logs, at the oldest":    update(withLog, repeat(keyPress(t, "pgup"), 8)...),
		"logs, previous":         update(onPrevious, logsMsg{stream: stream(onPrevious), text: log.String(), end: io.EOF}, up),
		"logs, refused":          update(onLogs, logsMsg{stream: stream(onLogs), end: status.Error(codes.PermissionDenied, "bob's key is read-only: it may see pods and events, not logs")}),
	}
}

// The help of every page, in every state, lists exactly the keys that do
// something there: none that does nothing (the operator would press it in
// vain), none that acts unlisted.
func TestHelpListsExactlyTheKeysThatWork(t *testing.T) {
	k := DefaultKeyMap()
	all := []key.Binding{k.Up, k.Down, k.Open, k.Back, k.Switch, k.Resync, k.Pause, k.Stop, k.Start, k.ScaleUp,
		k.Filter, k.Yes, k.No, k.Help, k.Quit, k.History, k.Rollback, k.Sort, k.Reverse, k.Rollout, k.Promote, k.Abort, k.Command, k.Diff,
		k.Pods, k.Events, k.Logs, k.Previous, k.Follow, k.Newest, k.PageUp, k.PageDown, k.Fleet, k.Halt, k.BreakGlass}
	for state, m := range helpStates(t) {
		listed := map[string]bool{}
		for _, b := range shownBindings(m) {
			if !b.Enabled() || b.Help().Key == "" {
				continue // help.Model does not show it
			}
			for _, name := range b.Keys() {
				if listed[name] {
					continue // in the short help and the full one
				}
				listed[name] = true
				if !acts(t, m, name) {
					t.Errorf("%s: help lists %q (%s), which does nothing there", state, name, b.Help().Desc)
				}
			}
		}
		// ScaleDown and Interrupt are left out: "+/-" of ScaleUp's help
		// says the first, and ctrl+c quits everywhere unlisted, as a
		// terminal's interrupt does.
		for _, b := range all {
			for _, name := range b.Keys() {
				if !listed[name] && acts(t, m, name) {
					t.Errorf("%s: %q (%s) does something there, and the help does not list it", state, name, b.Help().Desc)
				}
			}
		}
	}
}
