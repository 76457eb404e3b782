package convergecheck

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A refused fenced action is judged on what can be seen of its rollout:
// at the same version nothing may differ; at another, it moved meanwhile,
// and only a trace of this operator's own action (which nobody else
// writes) condemns the refusal.
func TestARefusedFencedActionChangedNothing(t *testing.T) {
	const me = "operator-1"
	before := &ctrlv1.Rollout{Id: 7, DeploymentId: "api", Revision: 3, State: "progressing", Wave: 1, Version: 4,
		Regions: []*ctrlv1.RolloutRegion{
			{Region: "eu", Wave: 1, State: "baking", Why: "healthy", BakeLeft: durationpb.New(time.Second)},
			{Region: "us", Wave: 2, State: "waiting"},
		}}
	with := func(change func(r *ctrlv1.Rollout)) *ctrlv1.Rollout {
		r := proto.Clone(before).(*ctrlv1.Rollout)
		change(r)
		return r
	}
	pause, promote, abort := ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE, ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT
	cases := []struct {
		name   string
		action ctrlv1.RolloutAction
		after  *ctrlv1.Rollout
		want   readBack
		says   string // in the violation; "" for none
	}{
		{name: "not read back", action: pause, want: readBackUnread},
		{name: "another rollout by then", action: pause, after: with(func(r *ctrlv1.Rollout) { r.Id, r.Version = 8, 1 }), want: readBackUnread},
		{name: "as it was, its bake's time left read later", action: pause, want: readBackUnchanged,
			after: with(func(r *ctrlv1.Rollout) { r.Regions[0].BakeLeft = durationpb.New(0) })},
		{name: "as it was, a check evaluated again meanwhile", action: pause, want: readBackUnchanged,
			after: with(func(r *ctrlv1.Rollout) {
				r.Regions[0].Checks = []*ctrlv1.RegionCheck{{Name: "error-rate", Verdict: "passing", Samples: 3}}
			})},
		{name: "changed at the same version", action: pause, want: readBackUnchanged, says: "state progressing -> paused",
			after: with(func(r *ctrlv1.Rollout) { r.State, r.Reason = "paused", "paused by "+me })},
		{name: "the driver stepped it", action: promote, want: readBackMoved,
			after: with(func(r *ctrlv1.Rollout) { r.Version, r.Regions[0].State = 5, "passed" })},
		{name: "paused by another", action: pause, want: readBackMoved,
			after: with(func(r *ctrlv1.Rollout) { r.Version, r.State, r.Reason = 5, "paused", "paused by operator-2" })},
		{name: "paused by me", action: pause, want: readBackMoved, says: `"paused by operator-1"`,
			after: with(func(r *ctrlv1.Rollout) { r.Version, r.State, r.Reason = 5, "paused", "paused by "+me })},
		{name: "aborted by me", action: abort, want: readBackMoved, says: "aborted by operator-1",
			after: with(func(r *ctrlv1.Rollout) { r.Version, r.State, r.Reason = 5, "rolled_back", "aborted by "+me })},
		{name: "promoted by me", action: promote, want: readBackMoved, says: "its region eu reads back passed",
			after: with(func(r *ctrlv1.Rollout) {
				r.Version, r.Wave, r.Regions[0].State, r.Regions[0].Why = 5, 2, "passed", "promoted by "+me
			})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, violation := judgeRefusal(me, c.action, before, c.after)
			if got != c.want {
				t.Errorf("read back %d, want %d", got, c.want)
			}
			switch {
			case c.says == "" && violation != "":
				t.Errorf("violation %q, want none", violation)
			case c.says != "" && !strings.Contains(violation, c.says):
				t.Errorf("violation %q, want one saying %q", violation, c.says)
			}
		})
	}
}

// Every strategy of the checker names its first wave; a plan that begins
// with its "*" wave (told by its deadline) dropped it.
func TestAPlanNeverBeginsWithTheStarWave(t *testing.T) {
	plan := func(s *ctrlv1.RolloutStrategy) *ctrlv1.Rollout {
		return &ctrlv1.Rollout{DeploymentId: "api", Revision: 2, State: "succeeded", Strategy: s}
	}
	both := waves([]string{"us"}, rolloutBake)
	both.Waves[0].Regions, both.Waves[1].Regions = []string{"us"}, []string{"eu"}
	onlyNamed := waves([]string{"us"}, rolloutBake)
	onlyNamed.Waves = onlyNamed.Waves[:1]
	dropped := waves([]string{"us"}, rolloutBake)
	dropped.Waves = dropped.Waves[1:]
	dropped.Waves[0].Regions = []string{"eu"}
	for _, r := range []*ctrlv1.Rollout{plan(both), plan(onlyNamed), plan(&ctrlv1.RolloutStrategy{})} {
		if v := droppedWave(r); v != "" {
			t.Errorf("%v: %s", r.Strategy, v)
		}
	}
	if v := droppedWave(plan(dropped)); !strings.Contains(v, "the named wave before it was dropped") {
		t.Errorf("a plan of the \"*\" wave alone: %q", v)
	}
}
