package gatecheck

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// A value put into a query is one PromQL string, whatever it holds: a
// deployment ID (or any identity) cannot end the string and add to the
// query.
func TestFillCannotInjectPromQL(t *testing.T) {
	hostile := `x"} or vector(1) or up{a="` + "\\\n"
	q, err := Fill(`sum(rate(requests_total{namespace={{namespace}},deployment={{ deployment }}}[1m]))`,
		Identity{Namespace: "ns", Deployment: hostile})
	if err != nil {
		t.Fatal(err)
	}
	expr, err := promql.ParseExpr(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var selectors []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			selectors = append(selectors, vs)
		}
		return nil
	})
	if len(selectors) != 1 {
		t.Fatalf("%s: %d selectors, want the one of the template", q, len(selectors))
	}
	got := map[string]string{}
	for _, m := range selectors[0].LabelMatchers {
		got[m.Name] = m.Value
	}
	if got["deployment"] != hostile || got["namespace"] != "ns" {
		t.Fatalf("%s: matchers %v, want deployment to be the hostile value itself", q, got)
	}
}

func TestCheckRefusesWhatCannotRunNamingTheField(t *testing.T) {
	good := jsontype.Check{Name: "error-rate", Kind: Metric, Query: `sum(rate(x{namespace={{namespace}}}[1m]))`, Bound: "< 0.01"}
	for _, tc := range []struct {
		name  string
		edit  func(*jsontype.Check)
		field string
	}{
		{"query that does not parse", func(c *jsontype.Check) { c.Query = "sum(rate(x[1m])" }, "query"},
		{"unknown placeholder", func(c *jsontype.Check) { c.Query = `x{pod={{pod}}}` }, "query"},
		{"placeholder in quotes", func(c *jsontype.Check) { c.Query = `x{namespace="{{namespace}}"}` }, "query"},
		{"unclosed placeholder", func(c *jsontype.Check) { c.Query = `x{namespace={{namespace}` }, "query"},
		{"range vector", func(c *jsontype.Check) { c.Query = `x[1m]` }, "query"},
		{"string", func(c *jsontype.Check) { c.Query = `"a"` }, "query"},
		{"no query", func(c *jsontype.Check) { c.Query = "" }, "query"},
		{"nonsense bound", func(c *jsontype.Check) { c.Bound = "< abc" }, "bound"},
		{"infinite bound", func(c *jsontype.Check) { c.Bound = "< +Inf" }, "bound"},
		{"empty range", func(c *jsontype.Check) { c.Bound = "5..1" }, "bound"},
		{"no bound", func(c *jsontype.Check) { c.Bound = "" }, "bound"},
		{"bad name", func(c *jsontype.Check) { c.Name = "Error Rate" }, "name"},
		{"interval too short", func(c *jsontype.Check) { c.IntervalSeconds = -1 }, "interval"},
		{"interval too long", func(c *jsontype.Check) { c.IntervalSeconds = 3600 }, "interval"},
		{"samples", func(c *jsontype.Check) { c.MinSamples = 100000 }, "min_samples"},
		{"failure limit", func(c *jsontype.Check) { c.FailureLimit = -1 }, "failure_limit"},
		{"kind", func(c *jsontype.Check) { c.Kind = "latency" }, "kind"},
		{"baseline with a bound", func(c *jsontype.Check) { c.Kind = Baseline }, "bound"},
		{"negative tolerance", func(c *jsontype.Check) { c.Kind, c.Bound, c.Tolerance = Baseline, "", -1 }, "tolerance"},
		{"alert with a query", func(c *jsontype.Check) { c.Kind, c.Bound = Alert, "" }, "query"},
		{"alert matchers that do not parse", func(c *jsontype.Check) { c.Kind, c.Bound, c.Query, c.Match = Alert, "", "", "namespace=" }, "match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			_, err := Check(c)
			if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("Check: %v, want ErrInvalid naming %q", err, tc.field)
			}
		})
	}
	c, err := Check(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.IntervalSeconds != 10 || c.MinSamples != 3 {
		t.Fatalf("defaults: interval %ds, min_samples %d; want 10s and 3", c.IntervalSeconds, c.MinSamples)
	}
	if _, err := Check(jsontype.Check{Name: "alerts", Kind: Alert}); err != nil {
		t.Fatalf("an alert check with the default matchers: %v", err)
	}
}

func TestJudge(t *testing.T) {
	metric := jsontype.Check{Kind: Metric, Bound: "< 0.01"}
	base := jsontype.Check{Kind: Baseline, Tolerance: 0.5, Margin: 0.001}
	before := 0.004
	for _, tc := range []struct {
		name      string
		c         jsontype.Check
		r         Result
		baselines map[string]float64
		before    *float64
		verdict   string
		why       string
	}{
		{"within", metric, Result{HasValue: true, Value: 0.002}, nil, nil, Pass, ""},
		{"beyond", metric, Result{HasValue: true, Value: 0.12}, nil, nil, Fail, "0.12 >= 0.01"},
		{"no data", metric, Result{}, nil, nil, None, "no data"},
		{"unreachable", metric, Result{Err: "prometheus unreachable"}, nil, nil, None, "prometheus unreachable"},
		{"range", jsontype.Check{Kind: Metric, Bound: "1..2"}, Result{HasValue: true, Value: 3}, nil, nil, Fail, "3 outside 1..2"},
		{"baseline median", base, Result{HasValue: true, Value: 0.12}, map[string]float64{"us-east": 0.002, "ap-south": 0.004, "sa-east": 0.1}, nil, Fail,
			"0.12 > 0.007 (baseline ap-south, sa-east, us-east 0.004)"},
		{"baseline within", base, Result{HasValue: true, Value: 0.003}, map[string]float64{"us-east": 0.002}, nil, Pass, ""},
		{"before promotion", base, Result{HasValue: true, Value: 0.02}, nil, &before, Fail, "0.02 > 0.007 (baseline before its promotion 0.004)"},
		{"no baseline", base, Result{HasValue: true, Value: 0.02}, nil, nil, None, "no baseline yet"},
		{"alert firing", jsontype.Check{Kind: Alert}, Result{HasValue: true, Value: 2}, nil, nil, Fail, "2 alert(s) firing matching {namespace={{namespace}}}"},
		{"no alert", jsontype.Check{Kind: Alert}, Result{HasValue: true, Value: 0}, nil, nil, Pass, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := Judge(tc.c, tc.r, tc.baselines, tc.before)
			if j.Verdict != tc.verdict || !strings.HasPrefix(j.Why, tc.why) {
				t.Fatalf("Judge: %s %q, want %s %q", j.Verdict, j.Why, tc.verdict, tc.why)
			}
		})
	}
}
