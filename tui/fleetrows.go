package tui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// How the fleet's rollouts in flight are grouped, for the fleet page and
// `unkey-tui fleet status` alike.

// FleetRow is a rollout in flight under one region of its current wave.
type FleetRow struct {
	Environment, Region string
	Rollout             *ctrlv1.Rollout
}

// fleetStates orders the states of rollouts in flight: moving first, then
// those that wait.
var fleetStates = []string{rolloutProgressing, rolloutPaused, rolloutHalted, rolloutQueued}

// FleetRows are the rollouts, one row per region of the wave each is in
// (a rollout whose wave has two regions is under both), by environment,
// region, state and deployment.
func FleetRows(rollouts []*ctrlv1.Rollout) []FleetRow {
	var rows []FleetRow
	for _, r := range rollouts {
		env := EnvironmentOf(r)
		regions := currentRegions(r)
		if len(regions) == 0 {
			regions = []string{"-"}
		}
		for _, region := range regions {
			rows = append(rows, FleetRow{Environment: env, Region: region, Rollout: r})
		}
	}
	slices.SortStableFunc(rows, func(a, b FleetRow) int {
		return cmp.Or(cmp.Compare(a.Environment, b.Environment), cmp.Compare(a.Region, b.Region),
			cmp.Compare(stateRank(a.Rollout.GetState()), stateRank(b.Rollout.GetState())),
			cmp.Compare(a.Rollout.GetDeploymentId(), b.Rollout.GetDeploymentId()))
	})
	return rows
}

func stateRank(state string) int {
	if i := slices.Index(fleetStates, state); i >= 0 {
		return i
	}
	return len(fleetStates)
}

// currentRegions are the regions of the wave r is in, by name.
func currentRegions(r *ctrlv1.Rollout) []string {
	var out []string
	for _, reg := range r.GetRegions() {
		if reg.GetWave() == r.GetWave() {
			out = append(out, reg.GetRegion())
		}
	}
	slices.Sort(out)
	return out
}

// EnvironmentOf is r's environment as people write it, WORKSPACE/ENV ("-"
// when ctrld did not say).
func EnvironmentOf(r *ctrlv1.Rollout) string {
	if r.GetWorkspaceId() == "" && r.GetEnvironmentId() == "" {
		return "-"
	}
	return r.GetWorkspaceId() + "/" + r.GetEnvironmentId()
}

// FleetEnvironment is an environment's rollouts in flight.
type FleetEnvironment struct {
	Name     string
	Rollouts []*ctrlv1.Rollout
}

// Counts says how many of its rollouts are in each state, and how many of
// the paused ones a halt paused: "2 progressing, 1 paused (1 by a halt),
// 3 queued".
func (e FleetEnvironment) Counts() string {
	counts, halted := map[string]int{}, 0
	states := slices.Clone(fleetStates)
	for _, r := range e.Rollouts {
		if !slices.Contains(states, r.GetState()) {
			states = append(states, r.GetState())
		}
		counts[r.GetState()]++
		if r.GetHaltId() != 0 && r.GetState() == rolloutPaused {
			halted++
		}
	}
	var parts []string
	for _, s := range states {
		if counts[s] == 0 {
			continue
		}
		part := fmt.Sprintf("%d %s", counts[s], s)
		if s == rolloutPaused && halted > 0 {
			part += fmt.Sprintf(" (%d by a halt)", halted)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// FleetEnvironments groups the rollouts by environment, by name.
func FleetEnvironments(rollouts []*ctrlv1.Rollout) []FleetEnvironment {
	var out []FleetEnvironment
	for _, r := range rollouts {
		name := EnvironmentOf(r)
		i := slices.IndexFunc(out, func(e FleetEnvironment) bool { return e.Name == name })
		if i < 0 {
			out, i = append(out, FleetEnvironment{Name: name}), len(out)
		}
		out[i].Rollouts = append(out[i].Rollouts, r)
	}
	slices.SortFunc(out, func(a, b FleetEnvironment) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// HoldOf says what holds r (ctrld's words: "frozen until Mon 09:00 CET
// by window weekend"), or that an operator broke glass for it; "" when
// neither.
func HoldOf(r *ctrlv1.Rollout) string {
	switch {
	case r.GetHeld() != "":
		return r.GetHeld()
	case r.GetBreakGlassBy() != "":
		return "break-glass by " + r.GetBreakGlassBy() + ": " + r.GetBreakGlassReason()
	}
	return ""
}

// FailedMark is the mark of a revision whose spec a rollout rolled back
// for a failed gate: "FAILED by rollout 7: eu-west: ..."; "" when it is
// not marked. Updating or rolling back to that spec again is refused
// unless retried on purpose (--retry-failed).
func FailedMark(r *ctrlv1.DeploymentRevision) string {
	if r.GetFailed() == "" {
		return ""
	}
	return fmt.Sprintf("FAILED by rollout %d: %s", r.GetFailedRolloutId(), Clean(r.GetFailed()))
}

// ScopeText names a scope for people, cleaned.
func ScopeText(s *ctrlv1.FleetScope) string {
	switch {
	case s.GetRegion() != "":
		return "region " + Clean(s.GetRegion())
	case s.GetEnvironmentId() != "":
		return Clean(s.GetWorkspaceId() + "/" + s.GetEnvironmentId())
	}
	return "everywhere"
}

// WindowWhen is a window's rule: `"0 17 * * 1-5" Europe/Berlin for 16h`,
// or `2026-12-24 00:00 CET .. 2026-12-27 00:00 CET`.
func WindowWhen(w *ctrlv1.FreezeWindow) string {
	zone := cmp.Or(w.GetTimeZone(), "UTC")
	if w.GetSchedule() != "" {
		return fmt.Sprintf("%q %s for %s", Clean(w.GetSchedule()), Clean(zone), exact(w.GetDuration().AsDuration()))
	}
	return inZone(w.GetStartsAt(), zone, "2006-01-02 15:04 MST") + " .. " + inZone(w.GetEndsAt(), zone, "2006-01-02 15:04 MST")
}

// WindowState is whether a window is closed now and until when, or when
// it closes next.
func WindowState(w *ctrlv1.FreezeWindow) string {
	zone := cmp.Or(w.GetTimeZone(), "UTC")
	switch {
	case w.GetClosed() && w.GetClosedUntil() == nil:
		return "CLOSED (ctrld cannot read it: it holds everything in its scope)"
	case w.GetClosed():
		return "CLOSED until " + inZone(w.GetClosedUntil(), zone, "Mon 2 Jan 15:04 MST")
	case w.GetNextClose() != nil:
		return "open; closes " + inZone(w.GetNextClose(), zone, "Mon 2 Jan 15:04 MST")
	}
	return "open; closes no more"
}

// inZone writes t in the IANA zone (UTC when it cannot be loaded).
func inZone(t *timestamppb.Timestamp, zone, layout string) string {
	if t == nil {
		return "-"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	return t.AsTime().In(loc).Format(layout)
}
