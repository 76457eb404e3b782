package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// confirmation is an action waiting for the operator's yes: what it will
// change, in words, and the command that does it. The words show IDs
// cleaned (see Clean); the command sends them as the server gave them.
type confirmation struct {
	what   string // short, for the status line while it runs, if cancelled or if it fails
	detail string // exactly what will change
	run    tea.Cmd
	// form, when set, asks for more than a yes (a reason, a name typed,
	// a scope); its submit is the action, and run is unused.
	form *form
}

func act(what, done string, call func(ctx context.Context) error) tea.Cmd {
	return actSaying(what, func(ctx context.Context) (string, error) { return done, call(ctx) })
}

// actSaying is act for a call whose result says what was done (a rollback
// to 0 learns from ctrld which revision it restored).
func actSaying(what string, call func(ctx context.Context) (done string, err error)) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done, err := call(ctx)
		return actionMsg{what: what, done: done, err: err}
	}
}

func (pc pageContext) resyncConfirmation(region string) *confirmation {
	what, done := "force resync of "+Clean(region), "requested a full resync of "+Clean(region)
	return &confirmation{
		what: what,
		detail: fmt.Sprintf("Force a full resync of region %s?\nIts agent re-reads all desired state and deletes managed objects not in it.", Clean(region)) +
			pc.regionWarning(region),
		run: act(what, done, func(ctx context.Context) error {
			_, err := pc.op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: region, Reason: "forced from unkey-tui"})
			return err
		}),
	}
}

func (pc pageContext) pauseConfirmation(region string, pause bool) *confirmation {
	verb, done, effect := "resume", "resumed", "Changes held back since the pause are delivered."
	if pause {
		verb, done, effect = "pause", "paused", "Its agent gets no changes until resumed; nothing is lost."
	}
	what := verb + " region " + Clean(region)
	done += " " + Clean(region)
	return &confirmation{
		what:   what,
		detail: fmt.Sprintf("%s streaming to region %s?\n%s", capitalize(verb), Clean(region), effect),
		run: act(what, done, func(ctx context.Context) error {
			_, err := pc.op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: region, Paused: pause})
			return err
		}),
	}
}

func (pc pageContext) statusConfirmation(d *ctrlv1.DeploymentInRegion, region string, want ctrlv1.DesiredStatus) *confirmation {
	shownID, shownRegion := Clean(d.GetDeploymentId()), Clean(region)
	verb, past, effect := "stop", "stopped", fmt.Sprintf("Its StatefulSet and Service in %s are deleted (%d replicas now).", shownRegion, d.GetReplicas())
	if want == ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING {
		verb, past, effect = "start", "started", fmt.Sprintf("It runs again in %s with %d replicas.", shownRegion, d.GetReplicas())
	}
	what := fmt.Sprintf("%s %s in %s", verb, shownID, shownRegion)
	done := fmt.Sprintf("%s %s in %s", past, shownID, shownRegion)
	return &confirmation{
		what:   what,
		detail: fmt.Sprintf("%s deployment %s in region %s?\n%s", capitalize(verb), shownID, shownRegion, effect) + pc.regionWarning(region),
		run: act(what, done, func(ctx context.Context) error {
			_, err := pc.op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: d.GetDeploymentId(), Region: region, Status: want})
			return err
		}),
	}
}

// regionWarning tells, below a confirmation's text, that a change for the
// region will not take effect now: the region is paused or its agent down
// (as last read). Empty when neither is known.
func (pc pageContext) regionWarning(region string) string {
	o := pc.overviewOf(region)
	if o == nil {
		return ""
	}
	now, shown := pc.now, Clean(region)
	var warnings []string
	if o.GetPaused() {
		warnings = append(warnings, strings.TrimSpace(fmt.Sprintf("%s is paused %s", shown, since(o.GetPausedSince(), now)))+
			": this change waits until it is resumed.")
	}
	if !o.GetAgentConnected() {
		warnings = append(warnings, strings.TrimSpace(fmt.Sprintf("%s's agent is down %s", shown, since(o.GetLastHeartbeat(), now)))+
			": this change waits until it reconnects.")
	}
	if len(warnings) == 0 {
		return ""
	}
	return "\n\nNote: " + strings.Join(warnings, "\nNote: ")
}

// overviewOf is the region's health as last read (see
// pageContext.overviews); nil when it was not.
func (pc pageContext) overviewOf(region string) *ctrlv1.RegionOverview {
	for _, o := range pc.overviews {
		if o.GetRegion() == region {
			return o
		}
	}
	return nil
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func (pc pageContext) scaleConfirmation(d *ctrlv1.DeploymentInRegion, region string, to int32) *confirmation {
	shownID, shownRegion := Clean(d.GetDeploymentId()), Clean(region)
	what := fmt.Sprintf("scale %s in %s to %d", shownID, shownRegion, to)
	done := fmt.Sprintf("scaled %s to %d in %s", shownID, to, shownRegion)
	return &confirmation{
		what:   what,
		detail: fmt.Sprintf("Scale deployment %s in region %s from %d to %d replicas?", shownID, shownRegion, d.GetReplicas(), to) + pc.regionWarning(region),
		run: act(what, done, func(ctx context.Context) error {
			_, err := pc.op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: d.GetDeploymentId(), Region: region, Replicas: to})
			return err
		}),
	}
}
