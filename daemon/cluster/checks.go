package cluster

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/gatecheck"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/checkevaluation"
	entdeployment "github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// MaxCheckResults bounds the results of one SyncChecks call.
const MaxCheckResults = 256

// maxCheckError bounds the error text kept of one evaluation.
const maxCheckError = 1024

// assignment is one query a region's agent evaluates for a rollout: a
// promoted region's check of the new spec (canary), a region still on the
// previous revision evaluating the same query of the old one (baseline),
// or a promoted region's own value of the old one from before its
// promotion (before).
type assignment struct {
	rollout *ent.Rollout
	check   jsontype.Check
	role    checkevaluation.Role
	query   string
	at      *time.Time
}

func (a assignment) id() string {
	return fmt.Sprintf("%d/%s/%s", a.rollout.ID, a.check.Name, a.role)
}

// SyncChecks implements ctrlv1.ClusterServiceServer: it keeps what the
// agent evaluated (of checks it still assigns the region), judged, and
// answers with what the region is to evaluate now.
func (s *Service) SyncChecks(ctx context.Context, req *ctrlv1.SyncChecksRequest) (*ctrlv1.SyncChecksResponse, error) {
	region := req.GetRegion()
	if err := checkRegion(ctx, region); err != nil {
		return nil, err
	}
	if n := len(req.GetResults()); n > MaxCheckResults {
		return nil, status.Errorf(codes.InvalidArgument, "results: at most %d per call, got %d", MaxCheckResults, n)
	}
	assigned, err := s.assignments(ctx, region)
	if err != nil {
		return nil, internal(s.log, "sync checks", err)
	}
	if len(req.GetResults()) > 0 {
		if err := s.keepResults(ctx, region, assigned, req.GetResults()); err != nil {
			return nil, internal(s.log, "sync checks", err)
		}
	}
	resp := &ctrlv1.SyncChecksResponse{Checks: make([]*ctrlv1.CheckAssignment, 0, len(assigned))}
	for _, id := range slices.Sorted(maps.Keys(assigned)) {
		a := assigned[id]
		m := &ctrlv1.CheckAssignment{Id: id, Query: a.query, Interval: durationpb.New(time.Duration(a.check.IntervalSeconds) * time.Second)}
		if a.at != nil {
			m.At = timestamppb.New(*a.at)
		}
		resp.Checks = append(resp.Checks, m)
	}
	return resp, nil
}

// checkedRollouts is the progressing rollouts with checks and their
// deployments' namespaces, as one replica read them: every agent calls
// every couple of seconds, and all of them are served from one read a
// second (checkedRolloutsAge) instead of one each.
type checkedRollouts struct {
	mu         sync.Mutex
	at         time.Time
	rollouts   []*ent.Rollout
	namespaces map[string]string
}

// checkedRolloutsAge is how old a replica's read of the rollouts with
// checks may be: what an agent is assigned may trail a step by as much,
// and results of a query no longer assigned then are kept, harmlessly
// (the gate counts only a promoted region's, since its promotion).
const checkedRolloutsAge = time.Second

func (c *checkedRollouts) read(ctx context.Context, client *ent.Client) ([]*ent.Rollout, map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < checkedRolloutsAge {
		return c.rollouts, c.namespaces, nil
	}
	rollouts, err := client.Rollout.Query().Where(rollout.StateEQ(rollout.StateProgressing)).All(ctx)
	if err != nil {
		return nil, nil, err
	}
	rollouts = slices.DeleteFunc(rollouts, func(r *ent.Rollout) bool { return len(r.Strategy.Checks) == 0 })
	namespaces := map[string]string{}
	if len(rollouts) > 0 {
		ids := make([]string, 0, len(rollouts))
		for _, r := range rollouts {
			ids = append(ids, r.DeploymentID)
		}
		deployments, err := client.Deployment.Query().Where(entdeployment.IDIn(ids...)).
			Select(entdeployment.FieldID, entdeployment.FieldWorkspaceID, entdeployment.FieldEnvironmentID).All(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range deployments {
			namespaces[d.ID] = naming.Namespace(d.WorkspaceID, d.EnvironmentID)
		}
	}
	c.at, c.rollouts, c.namespaces = time.Now(), rollouts, namespaces
	return rollouts, namespaces, nil
}

// assignments are the queries region evaluates now, by ID: for every
// progressing rollout with checks that reaches the region.
func (s *Service) assignments(ctx context.Context, region string) (map[string]assignment, error) {
	rollouts, namespaces, err := s.checked.read(ctx, s.client)
	if err != nil {
		return nil, err
	}
	out := map[string]assignment{}
	add := func(r *ent.Rollout, c jsontype.Check, role checkevaluation.Role, hash string, at *time.Time) {
		q, err := gatecheck.Query(c, gatecheck.Identity{Namespace: namespaces[r.DeploymentID], Deployment: r.DeploymentID, Region: region, SpecHash: hash})
		if err != nil { // checked when the strategy was set
			s.log.Error("cluster: a stored check does not fill in", "rollout", r.ID, "check", c.Name, "err", err)
			return
		}
		a := assignment{rollout: r, check: c, role: role, query: q, at: at}
		out[a.id()] = a
	}
	for _, r := range rollouts {
		if _, ok := namespaces[r.DeploymentID]; !ok || waveOf(r, region) < 0 {
			continue
		}
		st := r.Regions[region]
		promoted := waveOf(r, region) <= r.Wave && (st.State == desired.RegionProgressing || st.State == desired.RegionBaking)
		for _, c := range r.Strategy.Checks {
			switch {
			case promoted:
				add(r, c, checkevaluation.RoleCanary, r.ToSpec.Hash, nil)
				if c.Kind == gatecheck.Baseline && r.FromSpec.Hash != "" && st.PromotedAt != nil {
					add(r, c, checkevaluation.RoleBefore, r.FromSpec.Hash, st.PromotedAt)
				}
			case waveOf(r, region) > r.Wave && c.Kind == gatecheck.Baseline && r.FromSpec.Hash != "":
				add(r, c, checkevaluation.RoleBaseline, r.FromSpec.Hash, nil)
			}
		}
	}
	return out, nil
}

// waveOf is the index of region's wave in r, -1 when r does not reach it.
func waveOf(r *ent.Rollout, region string) int {
	for i, w := range r.Strategy.Waves {
		if slices.Contains(w.Regions, region) {
			return i
		}
	}
	return -1
}

// keepResults writes the results of assigned queries, each a canary's
// judged against its check (and baseline) as it comes in; results of
// queries no longer assigned are dropped.
func (s *Service) keepResults(ctx context.Context, region string, assigned map[string]assignment, results []*ctrlv1.CheckResult) error {
	// One row per assignment a call: every result of a call is stamped
	// with one time, so of an assignment's several (a batch from while
	// ctrld was away, or an agent repeating itself) the last says all,
	// and a call writes no more rows than the region is assigned.
	var ids []string
	latest := map[string]*ctrlv1.CheckResult{}
	for _, res := range results {
		if _, ok := assigned[res.GetId()]; !ok {
			continue
		}
		if _, seen := latest[res.GetId()]; !seen {
			ids = append(ids, res.GetId())
		}
		latest[res.GetId()] = res
	}
	if len(ids) == 0 {
		return nil // nothing assigned: no read, no write
	}
	now, err := store.Now(ctx, s.db)
	if err != nil {
		return err
	}
	creates := make([]*ent.CheckEvaluationCreate, 0, len(ids))
	for _, id := range ids {
		res, a := latest[id], assigned[id]
		r := gatecheck.Result{HasValue: res.GetHasValue(), Value: res.GetValue(), Err: validate.Text(res.GetError(), maxCheckError)}
		if r.HasValue && (math.IsNaN(r.Value) || math.IsInf(r.Value, 0)) {
			// Prometheus answers NaN for 0/0 (no traffic) and ±Inf for
			// x/0: no number to hold to a bound, and none a column keeps.
			r = gatecheck.Result{Err: fmt.Sprintf("the query's value is %v (no traffic?)", r.Value)}
		}
		create := s.client.CheckEvaluation.Create().SetRolloutID(a.rollout.ID).SetRegion(region).
			SetCheckName(a.check.Name).SetRole(a.role).SetError(r.Err).SetAt(now)
		if r.HasValue {
			create.SetValue(r.Value)
		}
		if a.role == checkevaluation.RoleCanary {
			j, err := s.judge(ctx, a, region, r, now)
			if err != nil {
				return err
			}
			create.SetVerdict(checkevaluation.Verdict(j.Verdict)).SetWhy(validate.Text(j.Why, maxCheckError)).
				SetBound(validate.Clip(j.Bound, 64)).SetBaselineFrom(validate.Clip(j.BaselineFrom, 255))
			if j.HasBaseline {
				create.SetBaseline(j.Baseline)
			}
		}
		creates = append(creates, create)
	}
	if len(creates) == 0 {
		return nil
	}
	return s.client.CheckEvaluation.CreateBulk(creates...).Exec(ctx)
}

// judge is the verdict of a canary's evaluation r: for a baseline check,
// against the latest values of the regions still on the previous
// revision from the last few intervals, or else the region's own value
// from before its promotion.
func (s *Service) judge(ctx context.Context, a assignment, region string, r gatecheck.Result, now time.Time) (gatecheck.Judgement, error) {
	if a.check.Kind != gatecheck.Baseline || r.Err != "" || !r.HasValue {
		return gatecheck.Judge(a.check, r, nil, nil), nil
	}
	fresh := now.Add(-3 * time.Duration(a.check.IntervalSeconds) * time.Second)
	rows, err := s.client.CheckEvaluation.Query().Where(
		checkevaluation.RolloutID(a.rollout.ID), checkevaluation.CheckName(a.check.Name), checkevaluation.ValueNotNil(),
		checkevaluation.Or(
			checkevaluation.And(checkevaluation.RoleEQ(checkevaluation.RoleBaseline), checkevaluation.AtGTE(fresh)),
			checkevaluation.And(checkevaluation.RoleEQ(checkevaluation.RoleBefore), checkevaluation.Region(region)),
		)).Order(ent.Asc(checkevaluation.FieldAt), ent.Asc(checkevaluation.FieldID)).All(ctx)
	if err != nil {
		return gatecheck.Judgement{}, err
	}
	baselines := map[string]float64{}
	var before *float64
	for _, row := range rows { // oldest first: the latest of each wins
		if row.Role == checkevaluation.RoleBefore {
			before = row.Value
			continue
		}
		baselines[row.Region] = *row.Value
	}
	return gatecheck.Judge(a.check, r, baselines, before), nil
}
