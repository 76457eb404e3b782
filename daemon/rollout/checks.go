package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/deploysync/deploysync/daemon/gatecheck"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/checkevaluation"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// Evaluation is one evaluation of a check in a promoted region, judged
// when it came in (daemon/cluster, daemon/gatecheck).
type Evaluation struct {
	At       time.Time
	Verdict  string // gatecheck.Pass, Fail or None
	Why      string
	HasValue bool
	Value    float64
	Bound    string
	// HasBaseline, Baseline and BaselineFrom are what a baseline check
	// compared with.
	HasBaseline  bool
	Baseline     float64
	BaselineFrom string
}

// CheckStatus is a check as it stands in one region: what the rollout
// page shows, and what the gate decides on.
type CheckStatus struct {
	Name string
	// Verdict is Passing, CheckFailed or Inconclusive.
	Verdict string
	Why     string
	// Latest is the newest evaluation (zero At: none yet).
	Latest Evaluation
	// Samples counts evaluations with a verdict since the bake began and
	// since the last one without; Failures failing evaluations since the
	// region's promotion.
	Samples, Failures int
	// Values are the newest evaluations' values, oldest first, at most
	// maxValues.
	Values []float64
}

// Check verdicts in a region.
const (
	Passing      = "passing"
	CheckFailed  = "failed"
	Inconclusive = "inconclusive"
)

const maxValues = 30

// JudgeChecks is each of checks as it stands in a region promoted at
// st.PromotedAt and healthy since st.HealthySince (nil: not healthy),
// from evals (the region's evaluations by check, oldest first), when its
// bake ends at bakeEnd. A check passes once it has min_samples
// evaluations with a verdict since the bake began and since its last
// evaluation without one, its newest came in after the bake's end, and
// no more failing evaluations than its failure_limit since the promotion;
// one more failing fails it. Anything else is inconclusive: no data, too
// few samples, an unreachable Prometheus never pass. A baseline check
// of a first rollout has no previous revision to compare with and passes
// as soon as the bake does.
func JudgeChecks(checks []jsontype.Check, firstRollout bool, evals map[string][]Evaluation, st jsontype.RegionRollout, bakeEnd time.Time) []CheckStatus {
	out := make([]CheckStatus, 0, len(checks))
	for _, c := range checks {
		cs := CheckStatus{Name: c.Name, Verdict: Inconclusive}
		if c.Kind == gatecheck.Baseline && firstRollout {
			cs.Verdict, cs.Why = Passing, "a first rollout has no previous revision to compare with"
			out = append(out, cs)
			continue
		}
		var lastFail Evaluation
		for _, e := range evals[c.Name] {
			if st.PromotedAt != nil && e.At.Before(*st.PromotedAt) {
				continue
			}
			cs.Latest = e
			if e.HasValue {
				cs.Values = append(cs.Values, e.Value)
			}
			if e.Verdict == gatecheck.Fail {
				cs.Failures++
				lastFail = e
			}
			switch {
			case st.HealthySince == nil || e.At.Before(*st.HealthySince):
			case e.Verdict == gatecheck.None:
				cs.Samples = 0
			default:
				cs.Samples++
			}
		}
		if n := len(cs.Values); n > maxValues {
			cs.Values = cs.Values[n-maxValues:]
		}
		switch {
		case cs.Failures > c.FailureLimit:
			cs.Verdict = CheckFailed
			cs.Why = fmt.Sprintf("%s: %s, %d failing evaluation(s), %d allowed", c.Name, lastFail.Why, cs.Failures, c.FailureLimit)
		case cs.Latest.At.IsZero():
			cs.Why = "no evaluation from the region's agent yet (is it older than checks?)"
		case cs.Latest.Verdict == gatecheck.None:
			cs.Why = cs.Latest.Why
		case cs.Samples < c.MinSamples:
			cs.Why = fmt.Sprintf("%d of %d samples in the bake", cs.Samples, c.MinSamples)
		case cs.Latest.At.Before(bakeEnd):
			cs.Verdict, cs.Why = Passing, "passing; the bake has not ended"
		default:
			cs.Verdict = Passing
		}
		out = append(out, cs)
	}
	return out
}

// ReadEvaluations is the canary evaluations of the rollouts with ids, by
// rollout, region and check, oldest first.
func ReadEvaluations(ctx context.Context, c *ent.Client, ids []int) (map[int]map[string]map[string][]Evaluation, error) {
	out := map[int]map[string]map[string][]Evaluation{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := c.CheckEvaluation.Query().
		Where(checkevaluation.RolloutIDIn(ids...), checkevaluation.RoleEQ(checkevaluation.RoleCanary)).
		Order(ent.Asc(checkevaluation.FieldAt), ent.Asc(checkevaluation.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		if out[row.RolloutID] == nil {
			out[row.RolloutID] = map[string]map[string][]Evaluation{}
		}
		byCheck := out[row.RolloutID][row.Region]
		if byCheck == nil {
			byCheck = map[string][]Evaluation{}
			out[row.RolloutID][row.Region] = byCheck
		}
		e := Evaluation{At: row.At, Verdict: string(row.Verdict), Why: row.Why, Bound: row.Bound, BaselineFrom: row.BaselineFrom}
		if row.Value != nil {
			e.HasValue, e.Value = true, *row.Value
		}
		if row.Baseline != nil {
			e.HasBaseline, e.Baseline = true, *row.Baseline
		}
		byCheck[row.CheckName] = append(byCheck[row.CheckName], e)
	}
	return out, nil
}
