package tui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/golden"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// rollouts are fakeOperator's: api's in flight, its canary eu-west
// baking and us-east, ap-south waiting; batch's rolled back after its
// canary crash-looped.
func rollouts() []*ctrlv1.Rollout {
	strategy := &ctrlv1.RolloutStrategy{OnFailure: "rollback", Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"eu-west"}, Bake: durationpb.New(time.Minute), Deadline: durationpb.New(10 * time.Minute)},
		{Regions: []string{"us-east", "ap-south"}, Bake: durationpb.New(2 * time.Minute), MaxFailures: 1, Deadline: durationpb.New(10 * time.Minute)},
	}}
	return []*ctrlv1.Rollout{
		{Id: 41, Version: 6, DeploymentId: "api", Revision: 8, FromRevision: 7, FromImage: "ghcr.io/acme/api:v7", ToImage: "ghcr.io/acme/api:v8", State: "progressing",
			Wave: 1, Strategy: strategy, Actor: "alice", CreatedAt: at(48 * time.Second), UpdatedAt: at(time.Second),
			Next: "wave 2 (us-east, ap-south) once eu-west is healthy for 12s more",
			Regions: []*ctrlv1.RolloutRegion{
				{Region: "eu-west", Wave: 1, State: "baking", Why: "3 of 3 instances ready on the new spec", PromotedAt: at(48 * time.Second),
					HealthySince: at(48 * time.Second), BakeLeft: durationpb.New(12 * time.Second)},
				{Region: "us-east", Wave: 2, State: "waiting"},
				{Region: "ap-south", Wave: 2, State: "waiting"},
			}},
		{DeploymentId: "batch", Revision: 3, FromRevision: 2, FromImage: "ghcr.io/acme/batch:v1", ToImage: "ghcr.io/acme/batch:crashloop", State: "rolled_back",
			Wave: 1, Strategy: strategy, Actor: "bob", CreatedAt: at(5 * time.Minute), FinishedAt: at(4 * time.Minute),
			Reason: "wave 1 failed: eu-west: 2 of 2 instances CrashLoopBackOff (restarts 3)",
			Next:   "nothing: rolled back; its regions run revision 2",
			Regions: []*ctrlv1.RolloutRegion{
				{Region: "eu-west", Wave: 1, State: "failed", Why: "2 of 2 instances CrashLoopBackOff (restarts 3)", PromotedAt: at(5 * time.Minute)},
				{Region: "us-east", Wave: 2, State: "waiting"},
				{Region: "ap-south", Wave: 2, State: "waiting"},
			}},
	}
}

func (f *fakeOperator) ListRollouts(context.Context, *ctrlv1.ListRolloutsRequest, ...grpc.CallOption) (*ctrlv1.ListRolloutsResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	return &ctrlv1.ListRolloutsResponse{Rollouts: rollouts()}, nil
}

func (f *fakeOperator) GetRollout(_ context.Context, req *ctrlv1.GetRolloutRequest, _ ...grpc.CallOption) (*ctrlv1.GetRolloutResponse, error) {
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	for _, r := range rollouts() {
		if r.DeploymentId == req.DeploymentId {
			return &ctrlv1.GetRolloutResponse{Rollout: r}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "deployment %q: no rollout: not found (its changes so far went to every region at once)", req.DeploymentId)
}

func (f *fakeOperator) ControlRollout(_ context.Context, req *ctrlv1.ControlRolloutRequest, _ ...grpc.CallOption) (*ctrlv1.ControlRolloutResponse, error) {
	f.record(req)
	r := rollouts()[0]
	r.Wave = 2
	return &ctrlv1.ControlRolloutResponse{Rollout: r}, nil
}

var tab = tea.KeyPressMsg{Code: tea.KeyTab}

// The rollout pages as an operator sees them: a rollout baking, one
// rolled back with its evidence, a promotion's confirmation, and the
// list of rollouts.
func TestRolloutViewGoldens(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		for _, view := range []string{"rollouts", "rollout-baking", "rollout-rolled-back", "confirm-promote", "confirm-abort", "rollout-none"} {
			t.Run(view+"-"+itoa(size[0])+"x"+itoa(size[1]), func(t *testing.T) {
				op := &fakeOperator{}
				if view == "rollout-none" {
					op.newest = "fresh" // deployed at once: no rollout
				}
				tm := start(t, op, size[0], size[1])
				waitFor(t, tm, "eu-west")
				keys(tm, tab, tab)
				waitFor(t, tm, "STARTED")
				switch view {
				case "rollout-baking", "confirm-promote", "confirm-abort":
					keys(tm, enter)
					waitFor(t, tm, "TIME LEFT")
					switch view {
					case "confirm-promote":
						keys(tm, press('P'))
						waitFor(t, tm, "[y] yes")
					case "confirm-abort":
						keys(tm, press('a'))
						waitFor(t, tm, "[y] yes")
					}
				case "rollout-rolled-back":
					keys(tm, down, enter)
					waitFor(t, tm, "TIME LEFT")
				case "rollout-none": // R on fresh's row
					keys(tm, tab, tab)
					waitFor(t, tm, "WORKFLOW")
					keys(tm, press('R'))
					waitFor(t, tm, "no rollout")
				}
				golden.RequireEqual(t, finalContent(t, tm))
			})
		}
	}
}

// The rollout page's keys each ask first, and send ControlRollout with
// the action named only on yes, fenced by the rollout shown (its id,
// revision, wave and version); a rollout that ended takes none of them.
func TestRolloutKeysAskThenControl(t *testing.T) {
	for _, tc := range []struct {
		key    rune
		action ctrlv1.RolloutAction
		asks   string
	}{
		{'P', ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, "Promote the rollout of api now? Wave 1 (eu-west) passes now"},
		{'p', ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE, "Pause the rollout of api?"},
		{'a', ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT, "Every region it reached (eu-west) returns to revision 7 (image ghcr.io/acme/api:v7)"},
	} {
		op := &fakeOperator{}
		c := newConsole(t, op, 120)
		c.turn(tab)
		c.turn(tab)
		c.turn(enter)
		c.update(press(tc.key))
		if got := words(c.m.Content()); !strings.Contains(got, tc.asks) {
			t.Errorf("%c asks:\n%s\nwant it to say %q", tc.key, got, tc.asks)
		}
		if len(op.calls()) != 0 {
			t.Fatalf("%c sent before the yes: %v", tc.key, op.calls())
		}
		confirm(c.update)
		calls := op.calls()
		if len(calls) != 1 || calls[0].(*ctrlv1.ControlRolloutRequest).Action != tc.action || calls[0].(*ctrlv1.ControlRolloutRequest).DeploymentId != "api" {
			t.Errorf("%c sent %v, want %s of api", tc.key, calls, tc.action)
		}
		want := &ctrlv1.RolloutFence{RolloutId: 41, Revision: 8, Wave: 1, Version: 6}
		if len(calls) == 1 && !proto.Equal(calls[0].(*ctrlv1.ControlRolloutRequest).GetFence(), want) {
			t.Errorf("%c sent fence %v, want %v: the rollout as shown", tc.key, calls[0].(*ctrlv1.ControlRolloutRequest).GetFence(), want)
		}
	}

	op := &fakeOperator{}
	c := newConsole(t, op, 120)
	c.turn(tab)
	c.turn(tab)
	c.press(down)
	c.turn(enter) // batch: rolled back
	for _, k := range "Ppa" {
		c.update(press(k))
		if got := ansi.Strip(c.m.Content()); strings.Contains(got, "[y] yes") {
			t.Errorf("%c on a rollout that ended asks:\n%s", k, got)
		}
	}
	if got := ansi.Strip(c.m.Content()); strings.Contains(got, "promote") || strings.Contains(got, "abort") {
		t.Errorf("the help of a rollout that ended offers its keys:\n%s", got)
	}
}
