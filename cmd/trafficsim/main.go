package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/deploysync/deploysync/internal/trafficsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "trafficsim:", err)
		os.Exit(1)
	}
}

func app() *cli.App {
	return &cli.App{
		Name:  "trafficsim",
		Usage: "SIMULATE requests to the Pods agentd manages and serve them as Prometheus metrics (a stand-in for dev and tests)",
		Description: "trafficsim is a simulator, not a load generator: it sends no request anywhere. kwok's Pods run no\n" +
			"code, so it stands in for the application behind each deployment. It watches the Pods labelled\n" +
			"unkey.managed.by=krane with a unkey.deployment.id through --kubeconfig's API server and, for each\n" +
			"one Running and Ready, counts --rate simulated requests a second on /metrics:\n" +
			"  " + trafficsim.RequestsMetric + "{namespace, deployment, spec_hash, code}\n" +
			"  " + trafficsim.DurationMetric + "{namespace, deployment, spec_hash} (histogram)\n" +
			"The image tag of the Pod's container sets how it answers: :" + trafficsim.ErrorsTag + " fails every 5th request\n" +
			"(20 %) with 500, :" + trafficsim.SlowTag + " takes 2 s per request, any other tag answers 200 in 50 ms.\n" +
			"Exact fractions, no randomness: tests may assert exact values.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig `file` of the region's API server (default: $KUBECONFIG, then in-cluster)", EnvVars: []string{"TRAFFICSIM_KUBECONFIG", "KUBECONFIG"}},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "address for /metrics and /healthz; port 0 picks a free one (the address is printed)", EnvVars: []string{"TRAFFICSIM_LISTEN"}},
			&cli.Float64Flag{Name: "rate", Value: trafficsim.DefaultRate, Usage: "simulated requests per second of each ready Pod", EnvVars: []string{"TRAFFICSIM_RATE"}},
		},
		Action: run,
	}
}

func run(c *cli.Context) error {
	if c.Float64("rate") <= 0 {
		return fmt.Errorf("--rate %g: want more than 0 requests a second", c.Float64("rate"))
	}
	cfg, err := kubeConfig(c.String("kubeconfig"))
	if err != nil {
		return err
	}
	cfg.UserAgent = "trafficsim"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	sim := trafficsim.New(trafficsim.Options{RequestsPerSecond: c.Float64("rate")})
	reg := prometheus.NewRegistry()
	reg.MustRegister(sim)

	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	defer srv.Close()
	// Printed once the port is bound, so whoever started it with port 0
	// may read the address and scrape at once.
	fmt.Fprintf(c.App.Writer, "trafficsim: serving SIMULATED request metrics of %s's Pods on http://%s/metrics\n", cfg.Host, lis.Addr())
	return sim.Run(c.Context, client)
}

// kubeConfig uses the kubeconfig file when given, else the in-cluster
// service account.
func kubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig/KUBECONFIG and not running in a cluster: %w", err)
	}
	return cfg, nil
}
