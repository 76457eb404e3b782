package convergecheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// FenceStats counts the operators' fenced actions on rollouts
// (ControlRollout with a RolloutFence: what a person confirmed) by
// outcome.
type FenceStats struct {
	// Acted counts the actions sent with the rollout's fence as read that
	// ctrld took; Moved those it refused because the rollout had moved
	// between the read and the action, NotNow those refused otherwise
	// (not possible in its state: a pause of a paused one). All three
	// are valid outcomes.
	Acted, Moved, NotNow int
	// Stale counts the actions sent with a fence that no rollout can
	// match any more (a version, wave or revision the rollout had
	// passed, or a rollout that had ended), every one refused: one that
	// acted is a violation.
	Stale int
	// Of the refused fenced actions, Unchanged counts those whose
	// rollout read back at the version it was read at, with its state,
	// wave, reason and regions as they were; MovedMeanwhile those whose
	// rollout moved meanwhile (the driver, another operator) and shows
	// no sign of this operator's action in it (a reason "paused by" or
	// "aborted by" it, a region "promoted by" it, that were not there);
	// Unread those whose rollout could not be read back, or was another
	// one by then.
	Unchanged, MovedMeanwhile, Unread int
}

func (f *FenceStats) add(o FenceStats) {
	f.Acted += o.Acted
	f.Moved += o.Moved
	f.NotNow += o.NotNow
	f.Stale += o.Stale
	f.Unchanged += o.Unchanged
	f.MovedMeanwhile += o.MovedMeanwhile
	f.Unread += o.Unread
}

// StrategyStats counts the strategies ctrld must refuse, and what the
// checker verified of them.
type StrategyStats struct {
	// Typos counts the strategies naming a region no one registered
	// (typoRegions) that ctrld refused: an environment's as invalid,
	// whatever the state; an update's own as invalid, or for the
	// deployment's state first (not found, a rollout in flight).
	Typos int
	// NoRegion counts the updates refused because a wave of their
	// strategy (their own or their environment's) names none of the
	// deployment's regions.
	NoRegion int
	// WroteNothing counts the refused updates whose fresh REV value the
	// checker then found in none of the deployment's revisions, its row
	// and its regions' copies; Unread those it could not look for (the
	// database down).
	WroteNothing, Unread int
}

func (s *StrategyStats) add(o StrategyStats) {
	s.Typos += o.Typos
	s.NoRegion += o.NoRegion
	s.WroteNothing += o.WroteNothing
	s.Unread += o.Unread
}

// typoRegions are typos of the checker's regions, which no one
// registers: a strategy naming one must be refused, and never stored.
var typoRegions = []string{"ue", "euu", "su", "uss"}

// movedText is in ctrld's refusal of a fenced action whose rollout moved
// (desired.ErrRolloutMoved).
const movedText = "not the rollout you confirmed"

// noRegionText is in ctrld's refusal of a change whose strategy has a wave
// naming none of the deployment's regions.
const noRegionText = "names none of its regions"

var rolloutActions = []ctrlv1.RolloutAction{ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE, ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME,
	ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT}

func actionName(a ctrlv1.RolloutAction) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "ROLLOUT_ACTION_"))
}

// fencedCall is a person at the console: it reads a rollout (one in
// flight, mostly), then sends an action fenced with what it read, or
// with a fence it knows to be stale (the version, wave or revision
// before, a rollout that ended, or what it read before it saw the
// rollout move while its confirmation was open), which ctrld must
// refuse. A refused fenced action must change nothing: the
// rollout is read back and compared (judgeRefusal).
func (o *operator) fencedCall(ctx context.Context) (string, error) {
	c, rng := o.client, o.rng
	id := pick(rng, deploymentIDs)
	if resp, err := c.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 100}); err != nil {
		return "fence-look", err
	} else if flying := resp.GetRollouts(); len(flying) > 0 {
		id = pick(rng, flying).DeploymentId
	}
	got, err := c.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: id})
	if err != nil {
		return "fence-look", err // NotFound: no rollout ever (a rejected call)
	}
	before := got.GetRollout()
	fence := &ctrlv1.RolloutFence{RolloutId: before.Id, Revision: before.Revision, Wave: before.Wave, Version: before.Version}
	stale := before.FinishedAt != nil // a fence on a rollout that ended never matches again
	if !stale && rng.IntN(3) == 0 {
		// The confirmation stays open while the driver (or another
		// operator) moves the rollout on: once it is seen to have moved,
		// what was confirmed is stale.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
		if again, err := c.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: id}); err == nil {
			now := again.GetRollout()
			stale = now.Id != before.Id || now.Version != before.Version
			if stale {
				// Judged against the rollout as it is now.
				before = now
			}
		}
	} else if !stale && rng.IntN(2) == 0 {
		// Each of these names this rollout (its id) as it no longer is,
		// and never will be again: its version and wave only grow, its
		// revision is fixed.
		var ways []func()
		if before.Version >= 2 {
			ways = append(ways, func() { fence.Version = before.Version - 1 })
		}
		if before.Wave >= 2 {
			ways = append(ways, func() { fence.Wave = before.Wave - 1 })
		}
		if before.Revision >= 2 {
			ways = append(ways, func() { fence.Revision = before.Revision - 1 })
		}
		if len(ways) > 0 {
			pick(rng, ways)()
			stale = true
		}
	}
	action := pick(rng, rolloutActions)
	op := "fenced-" + actionName(action)
	if stale {
		op = "stale-fenced-" + actionName(action)
	}
	resp, err := c.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: action, Fence: fence})
	what := fmt.Sprintf("%s of %s's rollout %d (revision %d, wave %d, version %d; %s) fenced with rollout %d, revision %d, wave %d, version %d",
		actionName(action), id, before.Id, before.Revision, before.Wave, before.Version, before.State,
		fence.RolloutId, fence.Revision, fence.Wave, fence.Version)
	switch code := status.Code(err); {
	case code == codes.OK && stale:
		o.count.violate("a stale fence acted: %s: ctrld took it (the rollout now: %s)", what, describeRollout(resp.GetRollout()))
		return op, err
	case code == codes.OK:
		if r := resp.GetRollout(); r.GetId() != before.Id || r.GetVersion() <= before.Version {
			o.count.violate("a fenced action acted on another rollout, or changed nothing: %s: it left %s", what, describeRollout(r))
		}
		o.count.tally(func(f *FenceStats, _ *StrategyStats) { f.Acted++ })
		return op, err
	case code == codes.FailedPrecondition:
	case code == codes.NotFound && stale:
		return op, err // the deployment deleted meanwhile
	default:
		if stale && code != codes.Unavailable && code != codes.DeadlineExceeded {
			o.count.violate("a stale fence was not refused for the rollout's state: %s: got %v, want FailedPrecondition", what, err)
		}
		return op, err
	}
	// Refused: nothing may have changed.
	o.count.tally(func(f *FenceStats, _ *StrategyStats) {
		switch {
		case stale:
			f.Stale++
		case strings.Contains(err.Error(), movedText):
			f.Moved++
		default:
			f.NotNow++
		}
	})
	var after *ctrlv1.Rollout
	if back, rerr := c.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: id}); rerr == nil {
		after = back.GetRollout()
	}
	outcome, violation := judgeRefusal(o.name, action, before, after)
	if violation != "" {
		o.count.violate("a refused fenced action changed its rollout: %s: refused (%v), yet %s", what, err, violation)
	}
	o.count.tally(func(f *FenceStats, _ *StrategyStats) {
		switch outcome {
		case readBackUnchanged:
			f.Unchanged++
		case readBackMoved:
			f.MovedMeanwhile++
		default:
			f.Unread++
		}
	})
	return op, err
}

type readBack int

const (
	readBackUnread readBack = iota
	readBackUnchanged
	readBackMoved
)

// judgeRefusal judges a fenced action of operator me that ctrld refused,
// on what can be seen of its rollout: before as read before the action,
// after as read back after it (nil: not read). At the same version the
// rollout must be as it was, field by field (every write of a rollout
// increments its version). At another version it moved meanwhile (the
// driver steps it, other operators act on it), and must show no trace of
// this action: only me writes "paused by me", "aborted by me" or
// "promoted by me", and me did nothing else in between. A resume leaves
// no such trace; a moved rollout proves nothing of it.
func judgeRefusal(me string, action ctrlv1.RolloutAction, before, after *ctrlv1.Rollout) (readBack, string) {
	if after == nil || after.Id != before.Id {
		return readBackUnread, ""
	}
	if after.Version == before.Version {
		if diff := rolloutDiff(before, after); diff != "" {
			return readBackUnchanged, fmt.Sprintf("it reads back at the same version %d, changed: %s", after.Version, diff)
		}
		return readBackUnchanged, ""
	}
	if after.Version < before.Version {
		return readBackMoved, fmt.Sprintf("its version went back from %d to %d", before.Version, after.Version)
	}
	switch action {
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE:
		if by := "paused by " + me; after.State == "paused" && after.Reason == by && !(before.State == "paused" && before.Reason == by) {
			return readBackMoved, fmt.Sprintf("it reads back %s, %q (version %d, was %s at %d)", after.State, after.Reason, after.Version, before.State, before.Version)
		}
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT:
		if strings.HasPrefix(after.Reason, "aborted by "+me) {
			return readBackMoved, fmt.Sprintf("it reads back %s, %q (version %d, was %s at %d)", after.State, after.Reason, after.Version, before.State, before.Version)
		}
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE:
		by := "promoted by " + me
		for _, a := range after.Regions {
			if !strings.HasPrefix(a.Why, by) {
				continue
			}
			i := slices.IndexFunc(before.Regions, func(b *ctrlv1.RolloutRegion) bool { return b.Region == a.Region })
			if i < 0 || !strings.HasPrefix(before.Regions[i].Why, by) {
				return readBackMoved, fmt.Sprintf("its region %s reads back %s, %q (version %d, was %d)", a.Region, a.State, a.Why, after.Version, before.Version)
			}
		}
	}
	return readBackMoved, ""
}

// rolloutDiff says how two reads of a rollout differ in what a write
// changes ("" when they do not): state, wave, reason, its end, and each
// region's state, reason and times. The times left (bake, deadline) and
// the regions' checks are computed at the read, not written.
func rolloutDiff(a, b *ctrlv1.Rollout) string {
	var d []string
	if a.State != b.State {
		d = append(d, fmt.Sprintf("state %s -> %s", a.State, b.State))
	}
	if a.Wave != b.Wave {
		d = append(d, fmt.Sprintf("wave %d -> %d", a.Wave, b.Wave))
	}
	if a.Reason != b.Reason {
		d = append(d, fmt.Sprintf("reason %q -> %q", a.Reason, b.Reason))
	}
	if (a.FinishedAt == nil) != (b.FinishedAt == nil) {
		d = append(d, "finished")
	}
	regions := func(r *ctrlv1.Rollout) []*ctrlv1.RolloutRegion {
		var out []*ctrlv1.RolloutRegion
		for _, x := range r.Regions {
			x = proto.Clone(x).(*ctrlv1.RolloutRegion)
			// Computed at the read: the times left, and the checks (from
			// the evaluations agents send, which no rollout write makes).
			x.BakeLeft, x.DeadlineLeft, x.Checks = nil, nil, nil
			out = append(out, x)
		}
		return out
	}
	ra, rb := regions(a), regions(b)
	if !slices.EqualFunc(ra, rb, func(x, y *ctrlv1.RolloutRegion) bool { return proto.Equal(x, y) }) {
		d = append(d, fmt.Sprintf("regions %s -> %s", describeRegions(ra), describeRegions(rb)))
	}
	return strings.Join(d, "; ")
}

func describeRegions(rs []*ctrlv1.RolloutRegion) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s(wave %d) %s %q", r.Region, r.Wave, r.State, r.Why))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// describeRollout is a rollout in a line, for a violation.
func describeRollout(r *ctrlv1.Rollout) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("rollout %d of %s, revision %d, %s at wave %d, version %d, %q, regions %s",
		r.Id, r.DeploymentId, r.Revision, r.State, r.Wave, r.Version, r.Reason, describeRegions(r.Regions))
}

// typoStrategy is a strategy naming a region no one registered as its
// canary, then "*".
func (o *operator) typoStrategy() (*ctrlv1.RolloutStrategy, string) {
	typo := pick(o.rng, typoRegions)
	return waves([]string{typo}, rolloutBake), typo
}

// waves is the checker's strategy: first (a canary) baking bake, then
// every other region. The "*" wave's deadline is starDeadline, so a
// rollout's plan shows which wave of it each of its waves is.
func waves(first []string, bake time.Duration) *ctrlv1.RolloutStrategy {
	return &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
		{Regions: first, Bake: durationpb.New(bake), Deadline: durationpb.New(rolloutDeadline)},
		{Regions: []string{"*"}, Bake: durationpb.New(bake), Deadline: durationpb.New(starDeadline)},
	}}
}

// checkRefusedUpdate verifies that an update ctrld refused wrote nothing:
// its fresh REV value is in none of the deployment's revisions, its row
// and its regions' copies. An update that failed without an answer
// (ctrld or the database down, the call's time out) may have committed.
func (o *operator) checkRefusedUpdate(ctx context.Context, id, rev string, err error) {
	switch status.Code(err) {
	case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return
	}
	if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), noRegionText) {
		o.count.tally(func(_ *FenceStats, s *StrategyStats) { s.NoRegion++ })
	}
	if o.carries == nil {
		return
	}
	where, cerr := o.carries(ctx, id, rev)
	o.count.tally(func(_ *FenceStats, s *StrategyStats) {
		if cerr != nil {
			s.Unread++
		} else if where == "" {
			s.WroteNothing++
		}
	})
	if cerr == nil && where != "" {
		o.count.violate("an update of %s refused (%v) wrote REV=%s to %s", id, err, rev, where)
	}
}

// operatorName is operator i's name, its token's, which ctrld records as
// the actor of its actions ("paused by operator-1").
func operatorName(i int) string { return fmt.Sprintf("operator-%d", i) }

// carries says where the deployment's spec has env REV=rev, read from the
// database: a revision of it, its row, or a region's copy; "" when
// nowhere.
func (s *System) carries(ctx context.Context, id, rev string) (string, error) {
	db := s.env.DB.Ent
	revisions, err := db.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id)).All(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range revisions {
		if r.Env["REV"] == rev {
			return fmt.Sprintf("its revision %d (%s by %s)", r.Revision, r.Action, r.Actor), nil
		}
	}
	d, err := db.Deployment.Query().Where(deployment.ID(id)).Only(ctx)
	switch {
	case ent.IsNotFound(err):
	case err != nil:
		return "", err
	case d.Env["REV"] == rev:
		return "its row", nil
	}
	topologies, err := db.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(id)).All(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range topologies {
		if t.Env["REV"] == rev {
			return "its copy in " + t.Region, nil
		}
	}
	return "", nil
}
