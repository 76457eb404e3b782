package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/trafficsim"
)

// simulatedJob is the scrape job of each region's traffic simulator in
// its Prometheus (the job label of the simulated series).
const simulatedJob = "trafficsim"

// startRegionMetrics gives every region what the metric gates (issue 30)
// query: a traffic simulator against the region's API server (a daemon
// of the stack, trafficsim-REGION: kwok's Pods run no code, so their
// traffic is SIMULATED) and a Prometheus of its own scraping it, whose
// URL goes on the region. Each Prometheus keeps its data under the state
// directory (TMPDIR) and stops with the stack; down removes what a crash
// left.
func startRegionMetrics(ctx context.Context, s *stack, bin string, clusters []regionCluster) error {
	say("fetching (or reusing) Debian's Prometheus server for one Prometheus per region (scripts/prometheus.sh)")
	if _, err := promtest.Binary(); err != nil {
		return err
	}
	for i := range clusters {
		c := &clusters[i]
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		// A fixed address, not port 0: `devstack restart` starts it again
		// where the region's Prometheus scrapes.
		if err := s.start(nil, "trafficsim-"+c.region, filepath.Join(bin, "trafficsim"), "--kubeconfig", c.kubeconfig, "--listen", addr); err != nil {
			return err
		}
		prom, err := promtest.Start(ctx, promtest.Options{Targets: []string{addr}, Job: simulatedJob})
		if err != nil {
			return fmt.Errorf("region %s: Prometheus: %w", c.region, err)
		}
		s.onStop(prom.Close)
		logs := filepath.Join(stateDir, "logs", "prometheus-"+c.region)
		if err := os.Symlink(prom.Dir(), logs); err != nil {
			return err
		}
		c.prometheus, c.prometheusURL = prom, prom.URL()
		say("  %s: traffic simulator (SIMULATED requests) on http://%s/metrics, scraped by Prometheus %s (its log in %s/)", c.region, addr, c.prometheusURL, logs)
	}
	return nil
}

// demoTrafficQuery is the demo's simulated requests a second in one region.
const demoTrafficQuery = `sum(rate(` + trafficsim.RequestsMetric + `{deployment="demo"}[1m]))`

// demoTrafficSeen is nil once the region's Prometheus has scraped the
// simulated requests of the demo's ready Pods.
func demoTrafficSeen(ctx context.Context, c regionCluster) error {
	samples, err := c.prometheus.Query(ctx, `sum(`+trafficsim.RequestsMetric+`{deployment="demo"}) > 0`)
	if err != nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("%s's Prometheus has no simulated requests of the demo yet", c.region)
	}
	return nil
}

// prometheusSummary tells the user where each region's Prometheus is and
// what to ask it.
func prometheusSummary(clusters []regionCluster) string {
	var b strings.Builder
	b.WriteString("each region's Prometheus, scraping its traffic simulator (SIMULATED requests to the demo's Pods: kwok's Pods run no code; an image tagged :errors fails 20 %, :slow takes 2 s):")
	for _, c := range clusters {
		fmt.Fprintf(&b, "\n  %s: %s", c.region, c.prometheusURL)
	}
	fmt.Fprintf(&b, "\n  try: curl -s %s/api/v1/query --data-urlencode 'query=%s'", clusters[0].prometheusURL, demoTrafficQuery)
	return b.String()
}

// freeLoopbackAddr is a loopback address with a port free right now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", errors.Join(errors.New("no free loopback port"), err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
