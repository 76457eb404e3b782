package operator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"entgo.io/ent/dialect/sql"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/gatecheck"
	rolloutgate "github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Rollout list sizes.
const (
	defaultRolloutLimit = 50
	maxRolloutLimit     = 500
)

// GetRollout implements ctrlv1.OperatorServiceServer.
func (s *Service) GetRollout(ctx context.Context, req *ctrlv1.GetRolloutRequest) (*ctrlv1.GetRolloutResponse, error) {
	id := req.GetDeploymentId()
	if err := validate.ID(id); err != nil {
		return nil, invalid("deployment_id: %v", err)
	}
	// The one in flight, else the newest: one query, in flight first.
	rows, err := s.client.Rollout.Query().Where(rollout.DeploymentID(id)).
		// Descending puts NULL (ended) last: the one in flight first.
		Order(rollout.ByInFlight(sql.OrderDesc()), rollout.ByCreatedAt(sql.OrderDesc()), rollout.ByID(sql.OrderDesc())).
		Limit(1).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	if len(rows) == 0 {
		exists, err := s.client.Deployment.Query().Where(deployment.ID(id)).Exist(ctx)
		if err != nil {
			return nil, s.viewError(err)
		}
		if !exists {
			return nil, s.viewError(fmt.Errorf("deployment %q: %w", id, desired.ErrNotFound))
		}
		return nil, s.viewError(fmt.Errorf("deployment %q: no rollout: %w (its changes so far went to every region at once)", id, desired.ErrNotFound))
	}
	plan, now, err := s.plan(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	evals, err := evaluations(ctx, s.client, rows)
	if err != nil {
		return nil, s.viewError(err)
	}
	return &ctrlv1.GetRolloutResponse{Rollout: rolloutMessage(rows[0], now, evals, plan)}, nil
}

// ListRollouts implements ctrlv1.OperatorServiceServer.
func (s *Service) ListRollouts(ctx context.Context, req *ctrlv1.ListRolloutsRequest) (*ctrlv1.ListRolloutsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > maxRolloutLimit:
		return nil, invalid("limit: must be 0..%d (0 means %d), got %d", maxRolloutLimit, defaultRolloutLimit, limit)
	case limit == 0:
		limit = defaultRolloutLimit
	}
	newest := []rollout.OrderOption{rollout.ByCreatedAt(sql.OrderDesc()), rollout.ByID(sql.OrderDesc())}
	rows, err := s.client.Rollout.Query().Where(rollout.InFlightNotNil()).WithDeployment(fleet.Environments).
		Order(newest...).Limit(limit).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	// Every rollout in flight is listed unless the limit cut them: the
	// plan is then judged on these, not on a read of them again.
	var inFlight []*ent.Rollout
	if len(rows) < limit {
		inFlight = append([]*ent.Rollout{}, rows...)
	}
	if !req.GetInFlightOnly() && len(rows) < limit {
		ended, err := s.client.Rollout.Query().Where(rollout.InFlightIsNil()).Order(newest...).Limit(limit - len(rows)).All(ctx)
		if err != nil {
			return nil, s.viewError(err)
		}
		rows = append(rows, ended...)
	}
	plan, now, err := s.planOf(ctx, inFlight)
	if err != nil {
		return nil, s.viewError(err)
	}
	// The list carries no checks: consoles read it every second, and a
	// rollout's evaluations are GetRollout's to read, for the one shown.
	out := &ctrlv1.ListRolloutsResponse{Rollouts: make([]*ctrlv1.Rollout, 0, len(rows))}
	for _, r := range rows {
		out.Rollouts = append(out.Rollouts, rolloutMessage(r, now, nil, plan))
	}
	return out, nil
}

// rolloutActions maps the API's actions to desired's.
var rolloutActions = map[ctrlv1.RolloutAction]string{
	ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE:       desired.RolloutPause,
	ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME:      desired.RolloutResume,
	ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE:     desired.RolloutPromote,
	ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT:       desired.RolloutAbort,
	ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS: desired.RolloutBreakGlass,
}

// ControlRollout implements ctrlv1.OperatorServiceServer.
func (s *Service) ControlRollout(ctx context.Context, req *ctrlv1.ControlRolloutRequest) (*ctrlv1.ControlRolloutResponse, error) {
	action, known := rolloutActions[req.GetAction()]
	audited := "rollout." + action
	if !known {
		audited = "rollout.control"
	}
	var r *ent.Rollout
	err := s.act(ctx, audited, req.GetDeploymentId(), req, func(ctx context.Context) (err error) {
		if !known {
			return fmt.Errorf("action: %w: want PAUSE, RESUME, PROMOTE, ABORT or BREAK_GLASS, got %s", desired.ErrInvalid, req.GetAction())
		}
		switch {
		case action == desired.RolloutBreakGlass:
			ctx = desired.WithBreakGlass(ctx, req.GetReason())
		case req.GetReason() != "":
			return fmt.Errorf("reason: %w: only BREAK_GLASS takes a reason", desired.ErrInvalid)
		}
		if f := req.GetFence(); f != nil {
			r, err = s.desired.ControlRollout(ctx, req.GetDeploymentId(), action, desired.RolloutFence{
				RolloutID: int(f.GetRolloutId()), Revision: int(f.GetRevision()), Wave: int(f.GetWave()), Version: f.GetVersion()})
			return err
		}
		r, err = s.desired.ControlRollout(ctx, req.GetDeploymentId(), action)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The action is done: a clock or a fleet that cannot be read costs
	// the times left their accuracy, or the hold its line, not the answer.
	plan, now, err := s.plan(ctx)
	if err != nil {
		plan, now = nil, time.Now()
	}
	evals, err := evaluations(ctx, s.client, []*ent.Rollout{r})
	if err != nil {
		evals = nil
	}
	return &ctrlv1.ControlRolloutResponse{Rollout: rolloutMessage(r, now, evals, plan)}, nil
}

// clock is the database's: the rollout's times (promoted, healthy since)
// are its, so the times left a replica shows do not depend on its own
// clock.
func (s *Service) clock(ctx context.Context) (time.Time, error) {
	return store.Now(ctx, s.sql)
}

// bakeOf is a wave's bake as the driver applies it: never shorter than
// rollout.MinBake.
func bakeOf(w jsontype.Wave) time.Duration {
	return max(time.Duration(w.BakeSeconds)*time.Second, rolloutgate.MinBake)
}

// SetRolloutStrategy implements ctrlv1.OperatorServiceServer.
func (s *Service) SetRolloutStrategy(ctx context.Context, req *ctrlv1.SetRolloutStrategyRequest) (*ctrlv1.SetRolloutStrategyResponse, error) {
	var set jsontype.Strategy
	err := s.act(ctx, "set-rollout-strategy", req.GetWorkspaceId()+"/"+req.GetEnvironmentId(), req, func(ctx context.Context) error {
		strategy, err := checkedStrategy("strategy", req.GetStrategy())
		if err != nil {
			return err
		}
		set, err = s.desired.SetRolloutStrategy(ctx, req.GetWorkspaceId(), req.GetEnvironmentId(), strategy)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetRolloutStrategyResponse{Strategy: strategyMessage(set)}, nil
}

// GetRolloutStrategy implements ctrlv1.OperatorServiceServer.
func (s *Service) GetRolloutStrategy(ctx context.Context, req *ctrlv1.GetRolloutStrategyRequest) (*ctrlv1.GetRolloutStrategyResponse, error) {
	strategy, err := s.desired.RolloutStrategy(ctx, req.GetWorkspaceId(), req.GetEnvironmentId())
	if err != nil {
		return nil, s.viewError(err)
	}
	return &ctrlv1.GetRolloutStrategyResponse{Strategy: strategyMessage(strategy)}, nil
}

// withRollout is ctx carrying a call's own strategy (its rollout field),
// checked, when the request has one; ctx itself when it has none, so the
// environment's applies.
func withRollout(ctx context.Context, p *ctrlv1.RolloutStrategy) (context.Context, error) {
	if p == nil {
		return ctx, nil
	}
	strategy, err := checkedStrategy("rollout", p)
	if err != nil {
		return ctx, err
	}
	return desired.WithStrategy(ctx, strategy), nil
}

// checkedStrategy is the API's strategy as desired's, checked
// (desired.CheckStrategy) and with its errors naming the request's field:
// field.waves[1].bake, say. A nil strategy is immediate.
func checkedStrategy(field string, p *ctrlv1.RolloutStrategy) (jsontype.Strategy, error) {
	s := jsontype.Strategy{OnFailure: p.GetOnFailure()}
	for i, w := range p.GetWaves() {
		name := fmt.Sprintf("%s.waves[%d]", field, i)
		bake, err := wholeSeconds(name+".bake", w.GetBake(), 0, desired.MaxBake)
		if err != nil {
			return s, err
		}
		deadline, err := wholeSeconds(name+".deadline", w.GetDeadline(), time.Second, desired.MaxDeadline)
		if err != nil {
			return s, err
		}
		s.Waves = append(s.Waves, jsontype.Wave{Regions: slices.Clone(w.GetRegions()), BakeSeconds: bake,
			MaxFailures: int(w.GetMaxFailures()), DeadlineSeconds: deadline})
	}
	for i, c := range p.GetChecks() {
		interval, err := wholeSeconds(fmt.Sprintf("%s.checks[%d].interval", field, i), c.GetInterval(), gatecheck.MinInterval, gatecheck.MaxInterval)
		if err != nil {
			return s, err
		}
		s.Checks = append(s.Checks, jsontype.Check{Name: c.GetName(), Kind: c.GetKind(), Query: c.GetQuery(), Bound: c.GetBound(),
			Tolerance: c.GetTolerance(), Margin: c.GetMargin(), Match: c.GetMatch(), IntervalSeconds: interval,
			FailureLimit: int(c.GetFailureLimit()), MinSamples: int(c.GetMinSamples())})
	}
	checked, err := desired.CheckStrategy(s)
	if err != nil {
		return s, renamed{field, err}
	}
	return checked, nil
}

// wholeSeconds is d in seconds, refused (naming field) unless it is whole
// seconds within lo..hi. Unset is 0 (for a deadline: its default). Bounds
// are checked here, on the seconds, because a Duration's seconds times
// time.Second can overflow into a value that looks in range.
func wholeSeconds(field string, d *durationpb.Duration, lo, hi time.Duration) (int, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("%s: %w: %v", field, desired.ErrInvalid, err)
	}
	secs, nanos := d.GetSeconds(), d.GetNanos()
	if nanos != 0 {
		return 0, fmt.Errorf("%s: %w: whole seconds only, got %s", field, desired.ErrInvalid, time.Duration(secs)*time.Second+time.Duration(nanos))
	}
	if secs < int64(lo/time.Second) || secs > int64(hi/time.Second) {
		return 0, fmt.Errorf("%s: %w: between %s and %s, got %ds", field, desired.ErrInvalid, lo, hi, secs)
	}
	return int(secs), nil
}

// renamed is desired.CheckStrategy's error, which names the fields
// "strategy.…", naming them as the request does ("rollout.…").
type renamed struct {
	field string
	err   error
}

func (r renamed) Error() string {
	if rest, ok := strings.CutPrefix(r.err.Error(), "strategy."); ok {
		return r.field + "." + rest
	}
	if rest, ok := strings.CutPrefix(r.err.Error(), "strategy"); ok {
		return r.field + rest
	}
	return r.field + ": " + r.err.Error()
}

func (r renamed) Unwrap() error { return r.err }

// strategyMessage is a strategy as the API gives it.
func strategyMessage(s jsontype.Strategy) *ctrlv1.RolloutStrategy {
	m := &ctrlv1.RolloutStrategy{OnFailure: s.OnFailure, Waves: make([]*ctrlv1.RolloutWave, 0, len(s.Waves))}
	for _, c := range s.Checks {
		m.Checks = append(m.Checks, &ctrlv1.RolloutCheck{Name: c.Name, Kind: c.Kind, Query: c.Query, Bound: c.Bound,
			Tolerance: c.Tolerance, Margin: c.Margin, Match: c.Match, Interval: seconds(c.IntervalSeconds),
			FailureLimit: int32(c.FailureLimit), MinSamples: int32(c.MinSamples)})
	}
	for _, w := range s.Waves {
		m.Waves = append(m.Waves, &ctrlv1.RolloutWave{
			Regions: slices.Clone(w.Regions), Bake: seconds(w.BakeSeconds),
			MaxFailures: int32(w.MaxFailures), Deadline: seconds(w.DeadlineSeconds),
		})
	}
	return m
}

func seconds(n int) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Second) }

// evaluations are the check evaluations of those of rows that have
// checks, by rollout, region and check.
func evaluations(ctx context.Context, c *ent.Client, rows []*ent.Rollout) (map[int]map[string]map[string][]rolloutgate.Evaluation, error) {
	var ids []int
	for _, r := range rows {
		if len(r.Strategy.Checks) > 0 {
			ids = append(ids, r.ID)
		}
	}
	return rolloutgate.ReadEvaluations(ctx, c, ids)
}

// rolloutMessage is a rollout as the API gives it, at now: its regions in
// wave order with their time left and their checks (from evals), what
// comes next, and what of the fleet's controls holds it (from plan, when
// given).
func rolloutMessage(r *ent.Rollout, now time.Time, evals map[int]map[string]map[string][]rolloutgate.Evaluation, plan *fleet.Plan) *ctrlv1.Rollout {
	m := &ctrlv1.Rollout{
		Id: int64(r.ID), Version: r.Version,
		DeploymentId: r.DeploymentID, Revision: int32(r.Revision), FromRevision: int32(r.FromRevision),
		FromImage: r.FromSpec.Image, ToImage: r.ToSpec.Image, State: string(r.State), Wave: int32(r.Wave + 1),
		Strategy: strategyMessage(r.Strategy), Reason: r.Reason, Actor: r.Actor,
		CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt),
	}
	if r.FinishedAt != nil {
		m.FinishedAt = timestamppb.New(*r.FinishedAt)
	}
	listed := map[string]bool{}
	for i, w := range r.Strategy.Waves {
		for _, name := range w.Regions {
			listed[name] = true
			region := regionMessage(name, i+1, r.Regions[name], w, now)
			region.Checks = regionChecks(r, name, w, evals[r.ID][name])
			m.Regions = append(m.Regions, region)
		}
	}
	// A region in no wave (none is, as desired plans them) is still shown.
	for _, name := range slices.Sorted(maps.Keys(r.Regions)) {
		if !listed[name] {
			m.Regions = append(m.Regions, regionMessage(name, 0, r.Regions[name], jsontype.Wave{}, now))
		}
	}
	m.Next = next(r, now)
	holdOf(m, r, plan)
	return m
}

// regionChecks are r's checks as they stand in a promoted region (none
// for a region not promoted yet).
func regionChecks(r *ent.Rollout, name string, w jsontype.Wave, evals map[string][]rolloutgate.Evaluation) []*ctrlv1.RegionCheck {
	st := r.Regions[name]
	if len(r.Strategy.Checks) == 0 || st.PromotedAt == nil {
		return nil
	}
	bakeEnd := time.Time{}
	if st.HealthySince != nil {
		bakeEnd = st.HealthySince.Add(bakeOf(w))
	}
	statuses := rolloutgate.JudgeChecks(r.Strategy.Checks, r.FromSpec.Hash == "", evals, st, bakeEnd)
	out := make([]*ctrlv1.RegionCheck, 0, len(statuses))
	for _, cs := range statuses {
		l := cs.Latest
		out = append(out, &ctrlv1.RegionCheck{Name: cs.Name, Verdict: cs.Verdict, HasValue: l.HasValue, Value: l.Value,
			Bound: l.Bound, HasBaseline: l.HasBaseline, Baseline: l.Baseline, BaselineFrom: l.BaselineFrom,
			Samples: int32(cs.Samples), Failures: int32(cs.Failures), Why: cs.Why, Values: cs.Values})
	}
	return out
}

func regionMessage(name string, wave int, st jsontype.RegionRollout, w jsontype.Wave, now time.Time) *ctrlv1.RolloutRegion {
	m := &ctrlv1.RolloutRegion{Region: name, Wave: int32(wave), State: st.State, Why: st.Why}
	if st.PromotedAt != nil {
		m.PromotedAt = timestamppb.New(*st.PromotedAt)
	}
	if st.HealthySince != nil {
		m.HealthySince = timestamppb.New(*st.HealthySince)
	}
	if left, ok := bakeLeft(st, w, now); ok {
		m.BakeLeft = durationpb.New(left)
	}
	if left, ok := deadlineLeft(st, w, now); ok {
		m.DeadlineLeft = durationpb.New(left)
	}
	return m
}

// bakeLeft is how much longer a baking region must stay healthy.
func bakeLeft(st jsontype.RegionRollout, w jsontype.Wave, now time.Time) (time.Duration, bool) {
	if st.State != desired.RegionBaking || st.HealthySince == nil {
		return 0, false
	}
	return max(0, bakeOf(w)-now.Sub(*st.HealthySince)), true
}

// deadlineLeft is how long a progressing region has to turn healthy.
func deadlineLeft(st jsontype.RegionRollout, w jsontype.Wave, now time.Time) (time.Duration, bool) {
	if st.State != desired.RegionProgressing || st.PromotedAt == nil {
		return 0, false
	}
	return max(0, time.Duration(w.DeadlineSeconds)*time.Second-now.Sub(*st.PromotedAt)), true
}

// next says what comes next in a rollout, for people: "wave 2 (us-east,
// ap-south) after eu-west bakes 45s more".
func next(r *ent.Rollout, now time.Time) string {
	switch r.State {
	case rollout.StateSucceeded:
		return fmt.Sprintf("nothing: every region runs revision %d", r.Revision)
	case rollout.StateRolledBack:
		if r.FromRevision == 0 {
			return "nothing: rolled back; its regions run nothing (it was the deployment's first)"
		}
		return fmt.Sprintf("nothing: rolled back; its regions run revision %d", r.FromRevision)
	case rollout.StateQueued:
		return fmt.Sprintf("wave 1 (%s) once the fleet's controls let it start (held says what holds it); an operator may break glass to start it now, or abort it",
			strings.Join(r.Strategy.Waves[0].Regions, ", "))
	case rollout.StatePaused:
		if r.HaltID != nil {
			return fmt.Sprintf("nothing until halt #%d is lifted (fleet resume %d), or an operator breaks glass for it (or aborts it: rolls it back)", *r.HaltID, *r.HaltID)
		}
		return "nothing until an operator resumes it (or aborts it: rolls it back)"
	case rollout.StateHalted:
		return "nothing until an operator resumes it (its failed regions get a new deadline) or aborts it (rolls it back)"
	}
	if r.Wave >= len(r.Strategy.Waves) {
		return ""
	}
	target := fmt.Sprintf("every region on revision %d", r.Revision)
	if n := r.Wave + 1; n < len(r.Strategy.Waves) {
		target = fmt.Sprintf("wave %d (%s)", n+1, strings.Join(r.Strategy.Waves[n].Regions, ", "))
	}
	w := r.Strategy.Waves[r.Wave]
	var unhealthy, baking []string
	var longestBake, deadline time.Duration
	for _, name := range w.Regions {
		st := r.Regions[name]
		switch st.State {
		case desired.RegionProgressing, desired.RegionWaiting:
			unhealthy = append(unhealthy, name)
			if left, ok := deadlineLeft(st, w, now); ok && (deadline == 0 || left < deadline) {
				deadline = left
			}
		case desired.RegionBaking:
			baking = append(baking, name)
			left, _ := bakeLeft(st, w, now)
			longestBake = max(longestBake, left)
		}
	}
	switch {
	case len(unhealthy) > 0:
		s := fmt.Sprintf("%s once %s %s healthy", target, strings.Join(unhealthy, ", "), plural(len(unhealthy), "is", "are"))
		s += " for " + short(bakeOf(w))
		if deadline > 0 {
			s += fmt.Sprintf(" (deadline in %s)", short(deadline))
		}
		return s
	case len(baking) > 0:
		return fmt.Sprintf("%s after %s %s %s more", target, strings.Join(baking, ", "), plural(len(baking), "bakes", "bake"), short(longestBake))
	}
	return target + " at the driver's next look"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// short writes d in whole seconds as people read it: 45s, 1m, 1m30s, 2h.
func short(d time.Duration) string {
	d = d.Round(time.Second)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
