package promtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/testproc"
	"github.com/deploysync/deploysync/internal/testrec"
)

// target serves one counter, promtest_probe_total, at /metrics and
// returns its host:port.
func target(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "promtest_probe_total", Help: "A counter for promtest's own tests."})
	probe.Add(7)
	reg.MustRegister(probe)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// atLeast accepts a result of one sample whose value is min or more.
func atLeast(min float64) func([]promtest.Sample) error {
	return func(samples []promtest.Sample) error {
		v, err := promtest.Single(samples)
		if err != nil {
			return err
		}
		if v < min {
			return fmt.Errorf("%g, want at least %g", v, min)
		}
		return nil
	}
}

// The server scrapes its targets every second, under its job, and the
// HTTP API answers with what it scraped.
func TestScrapesItsTargetsEverySecond(t *testing.T) {
	addr := target(t)
	s := promtest.StartForTest(t, promtest.Options{Targets: []string{addr}, Job: "probe"})
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Errorf("URL %s: want http://127.0.0.1:PORT", s.URL())
	}
	got := s.WaitFor(t, 30*time.Second, `promtest_probe_total`, atLeast(7))
	if m := got[0].Metric; m["job"] != "probe" || m["instance"] != addr {
		t.Errorf("labels %v: want job probe, instance %s", m, addr)
	}
	// Eight seconds after the first scrape, about eight more: scraped
	// every second, not every 15 (Prometheus' default) nor every 10.
	first := time.Now()
	s.WaitFor(t, 30*time.Second, `count_over_time(up{job="probe"}[10m])`, atLeast(9))
	if took := time.Since(first); took > 15*time.Second {
		t.Errorf("8 more scrapes took %s: not scraped every second", took)
	}
}

// Stop takes the server away (queries fail, as in a Prometheus outage);
// Start brings it back on the same URL with what it had scraped, and it
// scrapes on.
func TestStopMakesQueriesFailAndStartBringsDataBack(t *testing.T) {
	s := promtest.StartForTest(t, promtest.Options{Targets: []string{target(t)}})
	const scrapes = `count_over_time(promtest_probe_total[1h])`
	s.WaitFor(t, 30*time.Second, scrapes, atLeast(3))
	before, err := s.Query(t.Context(), scrapes)
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL()

	s.Stop()
	if samples, err := s.Query(t.Context(), "vector(1)"); err == nil {
		t.Fatalf("a stopped server answered: %v", samples)
	}
	s.Stop() // stopping a stopped server does nothing

	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Errorf("restarted at %s, want the same URL %s", s.URL(), url)
	}
	// Straight after the restart, before it scraped again: the samples
	// from before the outage are back (replayed from its write-ahead log).
	after, err := s.Query(t.Context(), scrapes)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := promtest.Single(after); err != nil || n < before[0].Value {
		t.Fatalf("after the restart %v (%v), want at least the %g scrapes from before", after, err, before[0].Value)
	}
	s.WaitFor(t, 30*time.Second, scrapes, atLeast(before[0].Value+2))
	if err := s.Start(t.Context()); err != nil {
		t.Errorf("Start on a running server: %v, want nothing done", err)
	}
}

// The rules given are loaded and evaluated every second: an alert fires,
// a recording rule records.
func TestEvaluatesItsRules(t *testing.T) {
	s := promtest.StartForTest(t, promtest.Options{Rules: `
groups:
  - name: promtest
    rules:
      - record: promtest:answer
        expr: vector(42)
      - alert: PromtestAlwaysFires
        expr: vector(1)
        labels:
          severity: page
`})
	s.WaitFor(t, 30*time.Second, `promtest:answer`, atLeast(42))
	got := s.WaitFor(t, 30*time.Second, `ALERTS{alertname="PromtestAlwaysFires", alertstate="firing"}`, atLeast(1))
	if got[0].Metric["severity"] != "page" {
		t.Errorf("alert %v: want its severity label", got[0].Metric)
	}
}

// Rules Prometheus refuses fail the start with Prometheus' own words,
// instead of a server that silently evaluates nothing.
func TestRefusedRulesFailTheStart(t *testing.T) {
	if testing.Short() {
		t.Skip("promtest: runs a Prometheus server; skipped in -short mode")
	}
	s, err := promtest.Start(t.Context(), promtest.Options{Rules: "groups:\n  - name: broken\n    rules:\n      - alert: Broken\n        expr: sum(\n"})
	if err == nil {
		s.Close()
		t.Fatal("a server with a broken rule started")
	}
	if !strings.Contains(err.Error(), "rules.yml") {
		t.Errorf("the error does not name the rule file: %v", err)
	}
	if _, err := promtest.Start(t.Context(), promtest.Options{Targets: []string{"http://127.0.0.1:80/metrics"}}); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("a URL as target: %v, want it refused as no host:port", err)
	}
}

// Query says what Prometheus said of an expression it refuses, and reads
// scalars and special values.
func TestQueryReadsWhatPrometheusAnswers(t *testing.T) {
	s := promtest.StartForTest(t, promtest.Options{})
	if _, err := s.Query(t.Context(), "sum("); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Errorf("a broken expression: %v, want Prometheus' bad_data", err)
	}
	if _, err := s.Query(t.Context(), "up[1m]"); err == nil || !strings.Contains(err.Error(), "range selector") {
		t.Errorf("a range selector: %v, want it refused", err)
	}
	for expr, want := range map[string]func(float64) bool{
		"scalar(vector(2.5))": func(v float64) bool { return v == 2.5 },
		"vector(0) / 0":       math.IsNaN,
		"vector(1) / 0":       func(v float64) bool { return math.IsInf(v, 1) },
	} {
		samples, err := s.Query(t.Context(), expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if v, err := promtest.Single(samples); err != nil || !want(v) {
			t.Errorf("%s = %v (%v)", expr, samples, err)
		}
	}
}

// A test that cannot get the binary fails, naming it, in CI and out of
// it: it never skips.
func TestMissingBinaryFailsTheTest(t *testing.T) {
	if testing.Short() {
		t.Skip("promtest: -short mode skips before looking for the binary")
	}
	missing := filepath.Join(t.TempDir(), "prometheus")
	t.Setenv(promtest.EnvBin, missing)
	for _, ci := range []string{"true", "false"} {
		t.Setenv("CI", ci)
		r := testrec.Run(t, func(tb testing.TB) { promtest.StartForTest(tb, promtest.Options{}) })
		if r.Skipped != "" || !strings.Contains(r.Failed, promtest.EnvBin+"="+missing) {
			t.Errorf("CI=%s: failed %q, skipped %q; want a failure naming %s", ci, r.Failed, r.Skipped, promtest.EnvBin)
		}
	}
	if _, err := promtest.Binary(); !errors.Is(err, promtest.ErrNoBinary) {
		t.Errorf("Binary: %v, want ErrNoBinary", err)
	}
}

const helperEnv = "PROMTEST_HELPER_START"

// TestMain doubles as the helper process of the reaping test: run with
// helperEnv set, the test binary starts a server, prints its URL and the
// directory its pid is recorded in, and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" {
		os.Exit(m.Run())
	}
	s, err := promtest.Start(context.Background(), promtest.Options{})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("URL", s.URL())
	time.Sleep(time.Minute)
	os.Exit(1)
}

// A test binary killed mid-test (SIGKILL: no cleanup runs) leaves no
// Prometheus running once the next server starts.
func TestKilledRunLeavesNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("promtest: runs a Prometheus server; skipped in -short mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var url string
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "URL "); ok {
			url = rest
			break
		}
		if strings.HasPrefix(lines.Text(), "ERROR") {
			t.Fatal(lines.Text())
		}
	}
	if url == "" {
		t.Fatal("the helper never reported its server")
	}
	dirs, _ := filepath.Glob(filepath.Join(testproc.Root(), fmt.Sprintf("prometheus-%d-*", cmd.Process.Pid)))
	if len(dirs) != 1 {
		t.Fatalf("want the helper's one server directory, got %v", dirs)
	}
	pids := testproc.Recorded(dirs[0])
	if len(pids) != 1 {
		t.Fatalf("want the helper's server running, got pids %v", pids)
	}
	cmd.Process.Kill()
	cmd.Wait()

	promtest.StartForTest(t, promtest.Options{}) // reaps what dead test binaries left

	eventually.True(t, 5*time.Second, fmt.Sprintf("the killed run's server (pid %d) is gone", pids[0]), func() bool {
		return !testproc.Alive(pids[0]) || !testproc.BelongsTo(pids[0], dirs[0])
	})
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Errorf("the killed run's directory %s survived (stat: %v)", dirs[0], err)
	}
	if resp, err := http.Get(url + "/-/ready"); err == nil {
		resp.Body.Close()
		t.Errorf("the killed run's server still answers at %s", url)
	}
}
