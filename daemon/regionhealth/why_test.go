package regionhealth

import (
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/ent"
)

// Why names what holds a region, most pressing first, with since when;
// WhyResource blames the region only for resources with changes waiting.
func TestWhySaysWhatHoldsTheRegionAndSinceWhen(t *testing.T) {
	now := time.Date(2026, 11, 22, 14, 10, 0, 0, time.UTC)
	pausedAt := now.Add(-8 * time.Minute)
	heard := now.Add(-3 * time.Minute)
	down := &ent.Agent{Identity: "krane-0", LastHeartbeat: &heard, LastError: "stream: connection refused"}
	live := &ent.Agent{Identity: "krane-0", LastHeartbeat: &now, ConnectedTo: "ctrld-1"}
	failure := &Failure{Kind: "deployment", ResourceID: "api", Error: "admission webhook denied the request", Since: now.Add(-2 * time.Minute)}

	cases := []struct {
		name   string
		h      Health
		want   []string // codes, in order
		phrase []string // each must appear in the joined messages
	}{
		{"in sync", Health{Agent: live, Connected: true}, nil, nil},
		{"paused with a dead agent and changes waiting",
			Health{Paused: true, PausedSince: &pausedAt, Agent: down, LagChanges: 3, OldestPending: now.Add(-5 * time.Minute)},
			[]string{ReasonPaused, ReasonAgentDown, ReasonWaiting},
			[]string{"paused since 14:02:00 UTC (8m ago)", "last heard 14:07:00 UTC (3m ago)", "connection refused", "waiting for 3 changes (oldest 5m)"}},
		{"no agent ever", Health{LagChanges: 1, OldestPending: now}, []string{ReasonNoAgent, ReasonWaiting}, []string{"no agent", "1 change "}},
		{"apply failing",
			Health{Agent: live, Connected: true, FailingResources: 2, OldestFailure: failure, LagChanges: 1, OldestPending: now},
			[]string{ReasonApplyFailing, ReasonWaiting},
			[]string{"2 resources failing", "deployment/api apply failing since 14:08:00 UTC (2m ago): admission webhook denied"}},
		{"full sync incomplete",
			Health{Agent: &ent.Agent{LastHeartbeat: &now, ConnectedTo: "c", LastFullSyncError: "cannot list ciliumnetworkpolicies",
				LastError: "cannot list ciliumnetworkpolicies"}, Connected: true},
			[]string{ReasonFullSyncFailing}, []string{"cannot list ciliumnetworkpolicies"}},
	}
	for _, c := range cases {
		why := c.h.Why(now)
		var codes, messages []string
		for _, r := range why {
			codes = append(codes, r.Code)
			messages = append(messages, r.Message)
		}
		if strings.Join(codes, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: reasons %v, want %v (%q)", c.name, codes, c.want, messages)
		}
		for _, p := range c.phrase {
			if !strings.Contains(strings.Join(messages, "\n"), p) {
				t.Errorf("%s: no %q in %q", c.name, p, messages)
			}
		}
	}

	paused := Health{Paused: true, PausedSince: &pausedAt, Agent: live, Connected: true}
	if why := paused.WhyResource("deployment/api", 0, nil, now); len(why) != 0 {
		t.Errorf("a resource with nothing waiting is in sync even in a paused region, got %v", why)
	}
	why := paused.WhyResource("deployment/api", 2, nil, now)
	if len(why) != 1 || why[0].Code != ReasonPaused || !strings.HasPrefix(why[0].Message, "2 changes wait: the region is paused since") {
		t.Errorf("waiting in a paused region: got %+v", why)
	}
	live2 := Health{Agent: live, Connected: true}
	why = live2.WhyResource("deployment/api", 1, failure, now)
	if len(why) != 1 || why[0].Code != ReasonApplyFailing || why[0].Resource != "deployment/api" {
		t.Errorf("failing resource: got %+v", why)
	}
}

// Above the count bound, pending changes are not counted per resource, and
// no resource of the region is said to be in sync for want of a count.
func TestTooManyPendingChangesAreNotCountedPerResource(t *testing.T) {
	now := time.Now()
	heard := now
	h := Health{Paused: true, Agent: &ent.Agent{LastHeartbeat: &heard, ConnectedTo: "c"}, Connected: true, LagChanges: maxPendingCount + 1}
	if got := h.NoStatePending(); got != PendingUnknown {
		t.Fatalf("pending of a resource without a state: %d, want unknown", got)
	}
	why := h.WhyResource("deployment/api", h.NoStatePending(), nil, now)
	if len(why) != 1 || why[0].Code != ReasonPaused || !strings.HasPrefix(why[0].Message, "changes may wait (the region has 50001 pending") {
		t.Errorf("got %+v", why)
	}
	h.Paused = false
	why = h.WhyResource("deployment/api", PendingUnknown, nil, now)
	if len(why) != 1 || why[0].Code != ReasonWaiting {
		t.Errorf("catching up: got %+v", why)
	}
	h.LagChanges = maxPendingCount
	if got := h.NoStatePending(); got != 0 {
		t.Errorf("counted region: pending of a resource without a state %d, want 0", got)
	}
}
