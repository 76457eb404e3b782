package rollout_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/agentd/checks"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/promtest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// errorRatio is an application's metric, app_error_ratio, for a real
// Prometheus to scrape.
func errorRatio(b *testing.B) (prometheus.Gauge, *promtest.Server) {
	b.Helper()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_error_ratio", Help: "bench"})
	reg.MustRegister(g)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	b.Cleanup(srv.Close)
	prom := promtest.StartForTest(b, promtest.Options{Targets: []string{strings.TrimPrefix(srv.URL, "http://")}})
	prom.WaitFor(b, 30*time.Second, "app_error_ratio", func(s []promtest.Sample) error {
		if len(s) == 0 {
			return fmt.Errorf("not scraped yet")
		}
		return nil
	})
	return g, prom
}

// runChecks runs agentd's check runner for region against prom.
func runChecks(b *testing.B, ctx context.Context, agent ctrlv1.ClusterServiceClient, region, promURL string) {
	b.Helper()
	r, err := checks.New(agent, region, checks.Config{PrometheusURL: promURL}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	go r.Run(ctx)
}

// BenchmarkMetricToRollback is the time from an application's metric
// crossing its check's bound (app_error_ratio set from 0 to 1, bound
// < 0.5) to the rollback's change reaching the canary's agent on its
// stream, through a real Prometheus (scraping every 1 s), agentd's check
// runner (the check evaluated every 1 s, results sent every 2 s, as
// agentd does), and a real ctrld on MariaDB at the driver's default
// interval; p50 and p99 over b.N rollouts.
func BenchmarkMetricToRollback(b *testing.B) {
	env := servertest.Start(b, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gauge, prom := errorRatio(b)
	eu := env.Agent("eu")
	events := follow(b, ctx, eu, "eu")
	follow(b, ctx, env.Agent("us"), "us")
	runChecks(b, ctx, eu, "eu", prom.URL())
	op := env.Operator("bench")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:0", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu", "us"}, Replicas: 1}); err != nil {
		b.Fatal(err)
	}
	waitImage(b, events, "app:0")
	canary := &ctrlv1.RolloutStrategy{
		Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Bake: durationpb.New(time.Hour), Deadline: durationpb.New(time.Hour)}, {Regions: []string{"us"}}},
		Checks: []*ctrlv1.RolloutCheck{{Name: "errors", Kind: "metric", Query: "max(app_error_ratio)", Bound: "< 0.5",
			Interval: durationpb.New(time.Second), MinSamples: 1}},
	}
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		image := fmt.Sprintf("app:%d", i+1)
		if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canary}); err != nil {
			b.Fatal(err)
		}
		waitImage(b, events, image)
		waitEvaluated(b, op, "eu")
		crossed := time.Now()
		gauge.Set(1)
		waitImage(b, events, "app:0") // the rollback: each one returns to it
		took = append(took, time.Since(crossed))
		waitEnded(b, op)
		gauge.Set(0)
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
}

// waitEvaluated waits until region's checks in api's rollout have a
// passing evaluation.
func waitEvaluated(b *testing.B, op ctrlv1.OperatorServiceClient, region string) {
	b.Helper()
	eventually.True(b, 30*time.Second, "no evaluation of "+region+"'s check", func() bool {
		r, err := op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
		for _, in := range r.GetRollout().GetRegions() {
			if err == nil && in.Region == region && len(in.Checks) > 0 && in.Checks[0].HasValue {
				return true
			}
		}
		return false
	})
}

// BenchmarkCheckCostFor100Rollouts is what checks cost a region's agent
// and its Prometheus with 100 rollouts in flight, the region their canary,
// each with an error-rate check and a baseline check (the defaults: every
// 10 s), over 30 s: the queries a second the agent sends its Prometheus
// (through a counting proxy), and how long its SyncChecks call to ctrld
// takes with that many assignments (ctrld reads the rollouts in flight
// for each call).
func BenchmarkCheckCostFor100Rollouts(b *testing.B) {
	const rollouts = 100
	env := servertest.Start(b, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, prom := errorRatio(b)
	target, err := url.Parse(prom.URL())
	if err != nil {
		b.Fatal(err)
	}
	var queries atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	b.Cleanup(counting.Close)
	eu := env.Agent("eu")
	env.AgentToken("us")
	op := env.Operator("bench")
	strategy := &ctrlv1.RolloutStrategy{
		Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Bake: durationpb.New(time.Hour), Deadline: durationpb.New(time.Hour)}, {Regions: []string{"us"}}},
		Checks: []*ctrlv1.RolloutCheck{
			{Name: "errors", Kind: "metric", Query: "max(app_error_ratio{namespace={{namespace}}})", Bound: "< 0.5"},
			{Name: "vs-old", Kind: "baseline", Query: "max(app_error_ratio{namespace={{namespace}}})", Tolerance: 0.5},
		}}
	for i := range rollouts {
		id := fmt.Sprintf("d%03d", i)
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:0", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu", "us"}, Replicas: 1}); err != nil {
			b.Fatal(err)
		}
		image := "app:1"
		if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Image: &image, Rollout: strategy}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		runCtx, stop := context.WithCancel(ctx)
		runChecks(b, runCtx, eu, "eu", counting.URL)
		var calls time.Duration
		const window = 30 * time.Second
		start := queries.Load()
		n := 0
		for began := time.Now(); time.Since(began) < window; time.Sleep(2 * time.Second) {
			t := time.Now()
			resp, err := eu.SyncChecks(ctx, &ctrlv1.SyncChecksRequest{Region: "eu"})
			if err != nil || len(resp.Checks) != 3*rollouts {
				b.Fatalf("SyncChecks: %d assignments, %v; want %d", len(resp.GetChecks()), err, 3*rollouts)
			}
			calls += time.Since(t)
			n++
		}
		stop()
		b.ReportMetric(float64(queries.Load()-start)/window.Seconds(), "queries/s")
		b.ReportMetric(float64(calls.Microseconds())/float64(n)/1000, "sync-ms")
	}
}
