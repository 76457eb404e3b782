package monitoring_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	agentdmetrics "github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/daemon/metrics"
)

const (
	rulesFile     = "deploysync-alerts.yaml"
	rulesTestFile = "deploysync-alerts.test.yaml"
	dashboardFile = "deploysync-dashboard.json"
)

func TestPromtoolChecksTheRules(t *testing.T) {
	promtool(t, "check", "rules", rulesFile)
}

// The rules fire on the series that mean trouble, once per region, and
// not on the others (see the test file: agent down, region paused, a
// paused region not counted as lagging, applies failing).
func TestTheRulesFireAsTheirUnitTestsExpect(t *testing.T) {
	promtool(t, "test", "rules", rulesTestFile)
}

func TestTheRulesReadOnlyMetricsThatExist(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	// Queries and annotations, which name metrics too; not the comments.
	var text []string
	for line := range strings.Lines(string(rules)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			text = append(text, line)
		}
	}
	checkMetricNames(t, rulesFile, strings.Join(text, ""))
}

// The dashboard is JSON Grafana can load (panels with queries) and reads
// only metrics that exist.
func TestTheDashboardLoadsAndReadsOnlyMetricsThatExist(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dashboard.Title == "" || dashboard.UID == "" {
		t.Errorf("%s: no title or uid", dashboardFile)
	}
	var exprs []string
	for _, p := range dashboard.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
	checkMetricNames(t, dashboardFile, strings.Join(exprs, "\n"))
}

// metricName matches the names of deploysync's metrics in a query.
var metricName = regexp.MustCompile(`\b(?:deploysync|agentd)_[a-z_]+\b`)

// checkMetricNames fails for every metric name in text that neither ctrld
// nor agentd registers (a histogram's _bucket, _sum and _count series
// count as its own).
func checkMetricNames(t *testing.T, file, text string) {
	t.Helper()
	registered := registeredNames()
	found := metricName.FindAllString(text, -1)
	if len(found) == 0 {
		t.Fatalf("%s names no deploysync metric", file)
	}
	slices.Sort(found)
	for _, name := range slices.Compact(found) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !registered[name] && !registered[base] {
			t.Errorf("%s reads %s, which neither ctrld nor agentd registers", file, name)
		}
	}
}

// registeredNames are the names of every metric ctrld's and agentd's
// metrics.New register.
func registeredNames() map[string]bool {
	names := nameRecorder{}
	metrics.New(names)
	agentdmetrics.New(names)
	return names
}

// nameRecorder is a prometheus.Registerer that keeps the names of what is
// registered with it: a registry gathers a labelled metric only once it
// has a series, and a fresh one has none.
type nameRecorder map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (n nameRecorder) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			n[m[1]] = true
		}
	}
	return nil
}

func (n nameRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		n.Register(c)
	}
}

func (n nameRecorder) Unregister(prometheus.Collector) bool { return false }

// promtool runs promtool with args in this directory and fails the test
// with its output when it fails.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtoolBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// promtoolBinary is $DEPLOYSYNC_PROMTOOL when set (for example a
// Prometheus 3 promtool, as `go tool task monitoring:v3` sets it), else
// the one scripts/promtool.sh fetches into the user cache on first use.
func promtoolBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("DEPLOYSYNC_PROMTOOL"); bin != "" {
		return bin
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "promtool.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/promtool.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
