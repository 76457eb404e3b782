package rolloutcheck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/trafficsim"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// simulate runs a traffic simulator for a region's Pods (kwok's run no
// code) and a real Prometheus scraping it, and returns the Prometheus.
func simulate(ctx context.Context, t *testing.T, kube kubernetes.Interface) *promtest.Server {
	t.Helper()
	addr, stop, err := trafficsim.Serve(ctx, kube, trafficsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return promtest.StartForTest(t, promtest.Options{Targets: []string{addr}, Rules: simAlerts})
}

// The checks of the README: the error rate and the p90 latency of the
// new spec's requests in the region.
func metricChecks() []*ctrlv1.RolloutCheck {
	const who = `namespace={{namespace}},deployment={{deployment}},spec_hash={{spec_hash}}`
	return []*ctrlv1.RolloutCheck{
		{Name: "error-rate", Kind: "metric", Bound: "< 0.05", Interval: durationpb.New(time.Second), MinSamples: 3,
			Query: `sum(rate(deploysync_sim_requests_total{` + who + `,code="500"}[5s])) / sum(rate(deploysync_sim_requests_total{` + who + `}[5s]))`},
		{Name: "latency-p90", Kind: "metric", Bound: "< 1", Interval: durationpb.New(time.Second), MinSamples: 3,
			Query: `histogram_quantile(0.9, sum by (le) (rate(deploysync_sim_request_duration_seconds_bucket{` + who + `}[5s])))`},
		// The same error rate against the regions still on the old
		// revision (the last wave: against its own from before).
		{Name: "error-vs-old", Kind: "baseline", Tolerance: 0.5, Margin: 0.02, Interval: durationpb.New(time.Second), MinSamples: 3,
			Query: `sum(rate(deploysync_sim_requests_total{` + who + `,code="500"}[5s])) / sum(rate(deploysync_sim_requests_total{` + who + `}[5s]))`},
	}
}

// simAlerts is a rule file that fires SimulatedErrors for a deployment
// failing more than one request a second.
const simAlerts = `groups:
  - name: sim
    rules:
      - alert: SimulatedErrors
        expr: sum by (namespace, deployment) (rate(deploysync_sim_requests_total{code="500"}[5s])) > 1
`

// Pods that are Ready but serve errors, or serve slowly, pass the health
// gate; their canary's checks, evaluated by its agent against its own
// Prometheus, fail it, and the rollout rolls back with the numbers. A
// good image passes every wave. A Prometheus stopped during the canary's
// bake leaves its checks without a verdict: the wave holds, then fails at
// the deadline. The API servers' own watches say no later wave's
// StatefulSet ever carried the images that failed.
func TestMetricChecksGateEveryWave(t *testing.T) {
	s := startWithMetrics(t)
	ctx := context.Background()
	// A deployment of its own: the clusters are the package's, and what
	// one test leaves in them another's image log would see.
	s.deploy(t, "shop", nil)
	strategy := canaryThenRest(6*time.Second, 20*time.Second)
	strategy.Checks = metricChecks()

	good := "ghcr.io/acme/shop:v2"
	s.update(t, "shop", good, strategy)
	if r := s.waitRollout(t, "shop", 2*time.Minute); r.GetState() != "succeeded" {
		t.Fatalf("the good image: %s (%s), want it through every wave", r.GetState(), r.GetReason())
	} else {
		for _, c := range r.Regions[0].Checks {
			t.Logf("good image, eu: %s %s %s %v samples %d", c.Name, c.Verdict, c.Bound, c.Value, c.Samples)
		}
	}
	s.waitReady(t, "shop", good, 1, time.Minute)

	for _, bad := range []struct{ image, check string }{
		// 0.2, as rate() over 5s sees it; error-rate or error-vs-old.
		{"ghcr.io/acme/shop:errors", "check error-"},
		{"ghcr.io/acme/shop:slow", "check latency-p90: "},
	} {
		s.update(t, "shop", bad.image, strategy)
		r := s.waitRollout(t, "shop", 2*time.Minute)
		if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "eu: "+bad.check) {
			t.Fatalf("%s: %s (%s), want rolled back on eu's %q", bad.image, r.GetState(), r.GetReason(), bad.check)
		}
		t.Logf("%s: %s", bad.image, r.GetReason())
		if len(s.logs["eu"].Sightings("shop", bad.image)) == 0 {
			t.Errorf("eu never carried %s: the canary proved nothing", bad.image)
		}
		s.neverPast(t, "shop", bad.image)
		s.waitReady(t, "shop", good, 1, time.Minute)
	}

	// An alert firing in the region fails it too. The image failed its
	// gate above, so shipping it again is a retry, on purpose (issue 32:
	// without the reason it is refused).
	alerted := "ghcr.io/acme/shop:errors"
	alerts := canaryThenRest(6*time.Second, 20*time.Second)
	alerts.Checks = []*ctrlv1.RolloutCheck{{Name: "alerts", Kind: "alert", Match: "namespace={{namespace}},deployment={{deployment}}", Interval: durationpb.New(time.Second)}}
	if _, err := s.op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "shop", Image: &alerted, Rollout: alerts}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the failed image again without a retry: %v, want FailedPrecondition", err)
	}
	if _, err := s.op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "shop", Image: &alerted, Rollout: alerts,
		RetryFailedReason: "see whether its alert fails it too"}); err != nil {
		t.Fatal(err)
	}
	if r := s.waitRollout(t, "shop", 2*time.Minute); r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "eu: check alerts: 1 alert(s) firing") {
		t.Fatalf("an alert firing in eu: %s (%s), want rolled back on it", r.GetState(), r.GetReason())
	} else {
		t.Logf("%s under an alert check: %s", alerted, r.GetReason())
	}
	s.neverPast(t, "shop", alerted)
	s.waitReady(t, "shop", good, 1, time.Minute)

	// eu's Prometheus goes down once the canary runs the new spec.
	unwatched := "ghcr.io/acme/shop:v3"
	s.update(t, "shop", unwatched, strategy)
	s.waitRegion(t, "shop", "eu", "baking", time.Minute)
	s.proms["eu"].Stop()
	start := time.Now()
	r := s.waitRollout(t, "shop", 2*time.Minute)
	if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "had no verdict within its deadline") {
		t.Fatalf("with eu's Prometheus down: %s (%s), want rolled back at the deadline for want of a verdict", r.GetState(), r.GetReason())
	}
	t.Logf("Prometheus down %s before the rollback: %s", time.Since(start).Round(time.Second), r.GetReason())
	s.neverPast(t, "shop", unwatched)
	if err := s.proms["eu"].Start(ctx); err != nil {
		t.Fatal(err)
	}
}
