package gatecheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// Verdicts of one evaluation.
const (
	Pass = "pass"
	Fail = "fail"
	// None: no verdict (no data, no baseline, or no answer from the
	// region's Prometheus). It never passes.
	None = "none"
)

// Result is one evaluation of a check's query, as the region's agent
// sent it: a value, no data, or why there was no answer.
type Result struct {
	HasValue bool
	Value    float64
	Err      string
}

// Judgement is the verdict of one evaluation, with what it was held to.
type Judgement struct {
	Verdict string
	// Why is the evidence of a failing evaluation ("0.12 > 0.01") or
	// why there is no verdict ("no data").
	Why string
	// Bound is what the value was held to: the check's bound, or for a
	// baseline check "<= x" from its baseline.
	Bound string
	// Baseline is the value a baseline check compared with, and
	// BaselineFrom where it came from.
	HasBaseline  bool
	Baseline     float64
	BaselineFrom string
}

// BeforePromotion is where a baseline comes from when no region is left
// on the previous revision.
const BeforePromotion = "before its promotion"

// Judge judges one evaluation r of check c in a promoted region.
// baselines are the same query's values in regions still running the
// previous revision, at about the same time (by region); before is the
// region's own value from before its promotion, used when there are
// none (nil: unknown).
func Judge(c jsontype.Check, r Result, baselines map[string]float64, before *float64) Judgement {
	if r.Err != "" {
		return Judgement{Verdict: None, Why: r.Err, Bound: c.Bound}
	}
	if !r.HasValue {
		return Judgement{Verdict: None, Why: "no data: the query returned no sample", Bound: c.Bound}
	}
	switch c.Kind {
	case Alert:
		if r.Value > 0 {
			return Judgement{Verdict: Fail, Why: fmt.Sprintf("%s alert(s) firing matching {%s}", Num(r.Value), matchOf(c)), Bound: "no alert firing"}
		}
		return Judgement{Verdict: Pass, Bound: "no alert firing"}
	case Baseline:
		j := Judgement{Verdict: None}
		switch {
		case len(baselines) > 0:
			j.HasBaseline, j.Baseline = true, median(slices.Collect(maps.Values(baselines)))
			j.BaselineFrom = strings.Join(slices.Sorted(maps.Keys(baselines)), ", ")
		case before != nil:
			j.HasBaseline, j.Baseline, j.BaselineFrom = true, *before, BeforePromotion
		default:
			j.Why = "no baseline yet: no region on the previous revision has a value, and the region's own from before its promotion is unknown"
			return j
		}
		limit := j.Baseline*(1+c.Tolerance) + c.Margin
		j.Bound = "<= " + Num(limit)
		if r.Value <= limit {
			j.Verdict = Pass
			return j
		}
		j.Verdict = Fail
		j.Why = fmt.Sprintf("%s > %s (baseline %s %s)", Num(r.Value), Num(limit), j.BaselineFrom, Num(j.Baseline))
		return j
	}
	b, err := ParseBound(c.Bound)
	if err != nil { // checked when the strategy was set
		return Judgement{Verdict: None, Why: "bound: " + err.Error(), Bound: c.Bound}
	}
	if b.Holds(r.Value) {
		return Judgement{Verdict: Pass, Bound: b.String()}
	}
	return Judgement{Verdict: Fail, Why: Num(r.Value) + b.Not(), Bound: b.String()}
}

func matchOf(c jsontype.Check) string {
	if c.Match == "" {
		return DefaultMatch
	}
	return c.Match
}

func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
