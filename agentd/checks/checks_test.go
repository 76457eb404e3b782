package checks_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/agentd/checks"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/promtest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ctrld is the narrow part of ctrld the runner talks to: it hands out
// assignments and keeps what comes back.
type ctrld struct {
	ctrlv1.ClusterServiceClient
	mu       sync.Mutex
	assigned []*ctrlv1.CheckAssignment
	results  map[string][]*ctrlv1.CheckResult
	fail     bool
	refused  int // calls refused while fail
}

func (c *ctrld) SyncChecks(_ context.Context, req *ctrlv1.SyncChecksRequest, _ ...grpc.CallOption) (*ctrlv1.SyncChecksResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		c.refused++
		return nil, context.DeadlineExceeded
	}
	for _, r := range req.Results {
		c.results[r.Id] = append(c.results[r.Id], r)
	}
	return &ctrlv1.SyncChecksResponse{Checks: c.assigned}, nil
}

func (c *ctrld) latest(id string) *ctrlv1.CheckResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rs := c.results[id]; len(rs) > 0 {
		return rs[len(rs)-1]
	}
	return nil
}

func assignment(id, query string) *ctrlv1.CheckAssignment {
	return &ctrlv1.CheckAssignment{Id: id, Query: query, Interval: durationpb.New(100 * time.Millisecond)}
}

// app exposes the gauge requests_error_ratio{region} with a value per
// region, for Prometheus to scrape.
func app(t *testing.T, values map[string]float64) string {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "requests_error_ratio", Help: "test"}, []string{"region"})
	reg.MustRegister(g)
	for r, v := range values {
		g.WithLabelValues(r).Set(v)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func run(t *testing.T, c *ctrld, cfg checks.Config) {
	t.Helper()
	cfg.SyncInterval = 50 * time.Millisecond
	r, err := checks.New(c, "eu", cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The runner evaluates what ctrld assigns against a real Prometheus and
// sends back one sample, no data, or why there is no answer.
func TestTheRunnerEvaluatesAssignmentsAgainstPrometheus(t *testing.T) {
	prom := promtest.StartForTest(t, promtest.Options{Targets: []string{app(t, map[string]float64{"eu": 0.25, "us": 0.5})}})
	prom.WaitFor(t, 30*time.Second, `requests_error_ratio`, func(s []promtest.Sample) error {
		if len(s) != 2 {
			return errTwo
		}
		return nil
	})
	c := &ctrld{results: map[string][]*ctrlv1.CheckResult{}, assigned: []*ctrlv1.CheckAssignment{
		assignment("one", `sum(requests_error_ratio{region="eu"})`),
		assignment("scalar", `scalar(sum(requests_error_ratio))`),
		assignment("none", `requests_error_ratio{region="nowhere"}`),
		assignment("two", `requests_error_ratio`),
		assignment("bad", `rate(requests_error_ratio)`),
	}}
	run(t, c, checks.Config{PrometheusURL: prom.URL()})
	for _, id := range []string{"one", "scalar", "none", "two", "bad"} {
		eventually.True(t, 10*time.Second, "a result for "+id, func() bool { return c.latest(id) != nil })
	}
	if r := c.latest("one"); !r.HasValue || r.Value != 0.25 || r.Error != "" {
		t.Errorf("one sample: %v", r)
	}
	if r := c.latest("scalar"); !r.HasValue || r.Value != 0.75 {
		t.Errorf("a scalar: %v", r)
	}
	if r := c.latest("none"); r.HasValue || r.Error != "" {
		t.Errorf("no data: %v, want no value and no error", r)
	}
	if r := c.latest("two"); r.HasValue || !strings.Contains(r.Error, "returned 2 series") {
		t.Errorf("two series: %v", r)
	}
	if r := c.latest("bad"); r.HasValue || !strings.Contains(r.Error, "prometheus:") {
		t.Errorf("a query Prometheus refuses: %v", r)
	}
	// Evaluated again at its interval.
	n := len(c.results["one"])
	eventually.True(t, 5*time.Second, "one evaluated again", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.results["one"]) > n
	})

	// Prometheus stops: no answer, saying why; it comes back: values again.
	prom.Stop()
	eventually.True(t, 10*time.Second, "an error while Prometheus is down", func() bool {
		r := c.latest("one")
		return !r.HasValue && strings.Contains(r.Error, "prometheus:")
	})
	if err := prom.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "a value once Prometheus is back", func() bool { return c.latest("one").GetHasValue() })
}

type errString string

func (e errString) Error() string { return string(e) }

const errTwo = errString("want two series")

// Without a Prometheus every assignment gets an answer saying so; a
// Prometheus that never answers costs at most the timeout; one that
// answers with too much is cut off; results a failed call carried are
// sent with the next.
func TestTheRunnerBoundsWhatAPrometheusCosts(t *testing.T) {
	c := &ctrld{results: map[string][]*ctrlv1.CheckResult{}, assigned: []*ctrlv1.CheckAssignment{assignment("a", "up")}}
	run(t, c, checks.Config{})
	eventually.True(t, 5*time.Second, "an answer without a Prometheus", func() bool {
		r := c.latest("a")
		return r != nil && strings.Contains(r.Error, "no --prometheus-url")
	})

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	hang := &ctrld{results: map[string][]*ctrlv1.CheckResult{}, assigned: []*ctrlv1.CheckAssignment{assignment("a", "up")}}
	start := time.Now()
	run(t, hang, checks.Config{PrometheusURL: "http://" + silent.Addr().String(), Timeout: 300 * time.Millisecond})
	eventually.True(t, 5*time.Second, "an answer from a Prometheus that never answers", func() bool { return hang.latest("a") != nil })
	if r := hang.latest("a"); r.HasValue || !strings.Contains(r.Error, "deadline exceeded") {
		t.Errorf("a silent Prometheus: %v", r)
	}
	t.Logf("a silent Prometheus answered after %s", time.Since(start))

	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
		for i := range 100000 {
			if i > 0 {
				w.Write([]byte(","))
			}
			w.Write([]byte(`{"metric":{"a":"b"},"value":[1,"1"]}`))
		}
		w.Write([]byte(`]}}`))
	}))
	t.Cleanup(huge.Close)
	big := &ctrld{results: map[string][]*ctrlv1.CheckResult{}, assigned: []*ctrlv1.CheckAssignment{assignment("a", "up")}}
	run(t, big, checks.Config{PrometheusURL: huge.URL})
	eventually.True(t, 5*time.Second, "an answer from a Prometheus that sends too much", func() bool { return big.latest("a") != nil })
	if r := big.latest("a"); r.HasValue || !strings.Contains(r.Error, "larger than 256 KiB") {
		t.Errorf("a 3.6 MB answer: %v", r)
	}

	away := &ctrld{results: map[string][]*ctrlv1.CheckResult{}, assigned: []*ctrlv1.CheckAssignment{assignment("a", "up")}}
	run(t, away, checks.Config{})
	eventually.True(t, 5*time.Second, "a first result", func() bool { return away.latest("a") != nil })
	away.mu.Lock()
	away.fail, away.results = true, map[string][]*ctrlv1.CheckResult{}
	away.mu.Unlock()
	// Evaluations pile up while ctrld is away.
	eventually.True(t, 5*time.Second, "calls refused", func() bool {
		away.mu.Lock()
		defer away.mu.Unlock()
		return away.refused >= 3
	})
	away.mu.Lock()
	away.fail = false
	away.mu.Unlock()
	eventually.True(t, 5*time.Second, "the results from while ctrld was away", func() bool {
		away.mu.Lock()
		defer away.mu.Unlock()
		return len(away.results["a"]) >= 2
	})
}

func TestABadPrometheusURLIsRefused(t *testing.T) {
	for _, u := range []string{"prometheus:9090", "ftp://x", "http://"} {
		if _, err := checks.New(&ctrld{}, "eu", checks.Config{PrometheusURL: u}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--prometheus-url") {
			t.Errorf("%q: %v, want a refusal naming --prometheus-url", u, err)
		}
	}
}
