package gatecheck

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// Kinds of check.
const (
	// Metric: the query's value within the check's bound.
	Metric = "metric"
	// Baseline: the query's value in a promoted region against the same
	// query in the regions still on the previous revision, or against the
	// region's own value from before its promotion when none is left.
	// Higher is worse.
	Baseline = "baseline"
	// Alert: any alert firing in the region whose labels match.
	Alert = "alert"
)

// Bounds and defaults of a check.
const (
	MaxChecks       = 10
	MaxQueryBytes   = 2048
	DefaultInterval = 10 * time.Second
	MinInterval     = time.Second
	MaxInterval     = 5 * time.Minute
	DefaultSamples  = 3
	MaxSamples      = 1000
	MaxFailureLimit = 1000
	// DefaultMatch is an alert check's matchers when it gives none:
	// alerts about the deployment's namespace.
	DefaultMatch = "namespace={{namespace}}"
)

// ErrInvalid marks a check that cannot be run as given.
var ErrInvalid = errors.New("invalid check")

// Identity is what a query may ask about: one deployment in one region,
// running one spec.
type Identity struct {
	Namespace, Deployment, Region, SpecHash string
}

var placeholder = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// Fill is template with the identity's placeholders replaced by PromQL
// strings: quoted, with every quote and backslash escaped, so a value
// can never end the string it stands in and add to the query. An unknown
// placeholder is an error.
func Fill(template string, id Identity) (string, error) {
	var unknown []string
	out := placeholder.ReplaceAllStringFunc(template, func(m string) string {
		var v string
		switch name := placeholder.FindStringSubmatch(m)[1]; name {
		case "namespace":
			v = id.Namespace
		case "deployment":
			v = id.Deployment
		case "region":
			v = id.Region
		case "spec_hash":
			v = id.SpecHash
		default:
			unknown = append(unknown, strconv.Quote(name))
			return m
		}
		return strconv.Quote(v)
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown placeholder %s: known are {{namespace}}, {{deployment}}, {{region}} and {{spec_hash}}", strings.Join(unknown, ", "))
	}
	if strings.Contains(out, "{{") || strings.Contains(out, "}}") {
		return "", errors.New("an unclosed placeholder: write {{namespace}}, {{deployment}}, {{region}} or {{spec_hash}}")
	}
	return out, nil
}

// Query is the PromQL the region's agent evaluates for check c about id:
// one sample (or none: no data).
func Query(c jsontype.Check, id Identity) (string, error) {
	if c.Kind != Alert {
		return Fill(c.Query, id)
	}
	match := c.Match
	if match == "" {
		match = DefaultMatch
	}
	m, err := Fill(match, id)
	if err != nil {
		return "", err
	}
	// No alert firing is a verdict (0), not "no data".
	return `count(ALERTS{alertstate="firing",` + m + `}) or vector(0)`, nil
}

var promql = parser.NewParser(parser.Options{})

// sample is an identity of the right shape that Check fills in to parse
// a template.
var sample = Identity{Namespace: "ns", Deployment: "dep", Region: "region", SpecHash: "0123456789abcdef"}

var name = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// Check checks a check an operator gives and fills in its defaults. The
// error names the field (relative to the check: "query", "bound"...).
func Check(c jsontype.Check) (jsontype.Check, error) {
	if !name.MatchString(c.Name) {
		return c, fmt.Errorf("name: %w: 1 to 40 lower-case letters, digits and '-', not starting or ending with '-'; got %q", ErrInvalid, c.Name)
	}
	if c.IntervalSeconds == 0 {
		c.IntervalSeconds = int(DefaultInterval / time.Second)
	}
	if c.IntervalSeconds < int(MinInterval/time.Second) || c.IntervalSeconds > int(MaxInterval/time.Second) {
		return c, fmt.Errorf("interval: %w: between %s and %s, got %ds", ErrInvalid, MinInterval, MaxInterval, c.IntervalSeconds)
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultSamples
	}
	if c.MinSamples < 1 || c.MinSamples > MaxSamples {
		return c, fmt.Errorf("min_samples: %w: between 1 and %d, got %d", ErrInvalid, MaxSamples, c.MinSamples)
	}
	if c.FailureLimit < 0 || c.FailureLimit > MaxFailureLimit {
		return c, fmt.Errorf("failure_limit: %w: between 0 and %d, got %d", ErrInvalid, MaxFailureLimit, c.FailureLimit)
	}
	switch c.Kind {
	case Metric:
		if _, err := ParseBound(c.Bound); err != nil {
			return c, fmt.Errorf("bound: %w: %v", ErrInvalid, err)
		}
	case Baseline:
		if c.Bound != "" {
			return c, fmt.Errorf("bound: %w: a baseline check is bound by its baseline (tolerance, margin), not a fixed bound", ErrInvalid)
		}
		for field, v := range map[string]float64{"tolerance": c.Tolerance, "margin": c.Margin} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e9 {
				return c, fmt.Errorf("%s: %w: a number from 0 to 1e9, got %v", field, ErrInvalid, v)
			}
		}
	case Alert:
		if c.Query != "" || c.Bound != "" {
			return c, fmt.Errorf("query: %w: an alert check takes match (label matchers), not a query or bound", ErrInvalid)
		}
	default:
		return c, fmt.Errorf("kind: %w: want %q, %q or %q, got %q", ErrInvalid, Metric, Baseline, Alert, c.Kind)
	}
	if c.Kind != Alert {
		if c.Query == "" {
			return c, fmt.Errorf("query: %w: a %s check needs a PromQL query", ErrInvalid, c.Kind)
		}
		if len(c.Query) > MaxQueryBytes {
			return c, fmt.Errorf("query: %w: at most %d bytes, got %d", ErrInvalid, MaxQueryBytes, len(c.Query))
		}
	} else if len(c.Match) > MaxQueryBytes {
		return c, fmt.Errorf("match: %w: at most %d bytes, got %d", ErrInvalid, MaxQueryBytes, len(c.Match))
	}
	field := "query"
	if c.Kind == Alert {
		field = "match"
	}
	q, err := Query(c, sample)
	if err != nil {
		return c, fmt.Errorf("%s: %w: %v", field, ErrInvalid, err)
	}
	expr, err := promql.ParseExpr(q)
	if err != nil {
		return c, fmt.Errorf("%s: %w: PromQL does not parse (placeholders are strings already: write namespace={{namespace}}): %v", field, ErrInvalid, err)
	}
	if t := expr.Type(); t != parser.ValueTypeVector && t != parser.ValueTypeScalar {
		return c, fmt.Errorf("%s: %w: the query must give a number (an instant vector of one sample, or a scalar), not a %s", field, ErrInvalid, t)
	}
	return c, nil
}
