package cmdline

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// checksHelp explains --checks, for the commands that take it.
const checksHelp = `--checks FILE adds checks every promoted region must pass for its whole bake, evaluated by
the region's agent against the region's own Prometheus (agentd --prometheus-url). FILE is YAML
(or JSON): a list of checks, each

   name           how views and evidence name it (lower-case letters, digits, '-')
   kind           metric: the query's value within bound
                  baseline: the query's value against the regions still on the previous
                            revision (or the region's own value before its promotion);
                            higher is worse
                  alert: any alert firing in the region whose labels match fails it
   query          PromQL (metric, baseline); {{namespace}}, {{deployment}}, {{region}} and
                  {{spec_hash}} become quoted strings: write namespace={{namespace}}
   bound          metric: "< 0.01", "<= x", "> x", ">= x" or "a..b"
   tolerance, margin   baseline: at most baseline x (1 + tolerance) + margin
   match          alert: label matchers (default namespace={{namespace}})
   interval       how often it is evaluated (default 10s)
   failure_limit  failing evaluations a region may have (default 0)
   min_samples    evaluations with a verdict a region needs in its bake (default 3)

No data, too few samples or an unreachable Prometheus is no verdict: it never passes, and holds
the wave until the region's deadline (with its bake) fails it. Example:

   - name: error-rate
     kind: metric
     query: sum(rate(http_requests_total{namespace={{namespace}},code=~"5.."}[1m]))
            / sum(rate(http_requests_total{namespace={{namespace}}}[1m]))
     bound: "< 0.01"
   - name: vs-old
     kind: baseline
     query: histogram_quantile(0.9, sum by (le) (rate(http_request_duration_seconds_bucket{namespace={{namespace}},spec_hash={{spec_hash}}}[1m])))
     tolerance: 0.2
   - name: alerts
     kind: alert`

// checkFile is one check as written in a --checks file.
type checkFile struct {
	Name         string  `json:"name"`
	Kind         string  `json:"kind"`
	Query        string  `json:"query"`
	Bound        string  `json:"bound"`
	Tolerance    float64 `json:"tolerance"`
	Margin       float64 `json:"margin"`
	Match        string  `json:"match"`
	Interval     string  `json:"interval"`
	FailureLimit int32   `json:"failure_limit"`
	MinSamples   int32   `json:"min_samples"`
}

// maxChecksFile bounds a --checks file: a handful of checks.
const maxChecksFile = 64 << 10

// readChecks reads a --checks file. What cannot be read is refused here;
// what the checks mean is ctrld's to check.
func readChecks(path string) ([]*ctrlv1.RolloutCheck, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--checks: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxChecksFile+1))
	if err != nil {
		return nil, fmt.Errorf("--checks %s: %w", path, err)
	}
	if len(data) > maxChecksFile {
		return nil, fmt.Errorf("--checks %s: larger than %d KiB", path, maxChecksFile>>10)
	}
	var written []checkFile
	if err := yaml.UnmarshalStrict(data, &written); err != nil {
		return nil, fmt.Errorf("--checks %s: want a YAML or JSON list of checks (unkey-tui rollout strategy set --help): %w", path, err)
	}
	if len(written) == 0 {
		return nil, fmt.Errorf("--checks %s: no checks in it", path)
	}
	out := make([]*ctrlv1.RolloutCheck, 0, len(written))
	for i, c := range written {
		m := &ctrlv1.RolloutCheck{Name: c.Name, Kind: c.Kind, Query: c.Query, Bound: c.Bound, Tolerance: c.Tolerance,
			Margin: c.Margin, Match: c.Match, FailureLimit: c.FailureLimit, MinSamples: c.MinSamples}
		if c.Interval != "" {
			d, err := time.ParseDuration(c.Interval)
			if err != nil {
				return nil, fmt.Errorf("--checks %s: check %d (%s): interval %q: want a duration like 10s or 1m", path, i, tui.Clean(c.Name), tui.Clean(c.Interval))
			}
			m.Interval = durationpb.New(d)
		}
		out = append(out, m)
	}
	return out, nil
}

var errChecksWithoutWaves = errors.New("--checks: checks gate waves: give them with --wave")

// checksText writes a strategy's checks, a line each.
func checksText(out io.Writer, checks []*ctrlv1.RolloutCheck) {
	for _, c := range checks {
		what := tui.Clean(c.Query) + " " + tui.Clean(c.Bound)
		switch c.Kind {
		case "baseline":
			what = fmt.Sprintf("%s within baseline x (1 + %g) + %g", tui.Clean(c.Query), c.Tolerance, c.Margin)
		case "alert":
			what = "no alert firing matching {" + tui.Clean(c.Match) + "}"
			if c.Match == "" {
				what = "no alert firing matching {namespace={{namespace}}}"
			}
		}
		fmt.Fprintf(out, "check %s (%s): %s; every %s, %d samples, %d failures allowed\n", tui.Clean(c.Name), tui.Clean(c.Kind), what,
			short(c.GetInterval().AsDuration()), c.MinSamples, c.FailureLimit)
	}
}

// regionChecksText writes the checks of a rollout's promoted regions: a
// row per region and check, with the values over the bake as a chart.
func regionChecksText(out io.Writer, r *ctrlv1.Rollout) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	header := false
	for _, reg := range r.Regions {
		for _, c := range reg.Checks {
			if !header {
				fmt.Fprintln(w, "REGION\tCHECK\tVERDICT\tVALUE\tBOUND\tBASELINE\tSAMPLES\tFAILURES\tOVER THE BAKE\tWHY")
				header = true
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", tui.Clean(reg.Region), tui.Clean(c.Name), tui.Clean(c.Verdict),
				tui.CheckValue(c), tui.Clean(c.Bound), tui.CheckBaseline(c), c.Samples, c.Failures, tui.Sparkline(c.Values), tui.Clean(c.Why))
		}
	}
	return w.Flush()
}
