package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/checks"
	"github.com/deploysync/deploysync/agentd/liveview"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/internal/dial"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}

func env(name string) []string {
	return []string{"AGENTD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func app() *cli.App {
	host, _ := os.Hostname()
	return &cli.App{
		Name:    "agentd",
		Usage:   "apply one region's desired state from ctrld to a Kubernetes cluster",
		Version: version,
		Description: "agentd follows ctrld's WatchDeploymentChanges stream for --region and applies it with\n" +
			"server-side apply: a headless Service and a StatefulSet per deployment. It reports Pods and\n" +
			"its applied cursor back to ctrld. Run two replicas with --leader-elect: one applies, the\n" +
			"other stands by. Every flag can also be set through the environment variable shown.",
		Flags: slices.Concat([]cli.Flag{
			&cli.StringFlag{Name: "region", Required: true, Usage: "the region (cluster) this agent serves; must match its token", EnvVars: env("region")},
			&cli.StringFlag{Name: "identity", Value: host, Usage: "name of this replica (default: the host name, i.e. the Pod name)", EnvVars: append(env("identity"), "POD_NAME")},
			&cli.StringFlag{Name: "token", Usage: "agent token, from: ctrld token create --region R (prefer --token-file)", EnvVars: env("token")},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the agent token", EnvVars: env("token-file")},
		}, dial.Flags(env), []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig `file` (default: $KUBECONFIG, then in-cluster)", EnvVars: append(env("kubeconfig"), "KUBECONFIG")},
			&cli.Float64Flag{Name: "kube-qps", Value: 50, Usage: "Kubernetes API requests per second", EnvVars: env("kube-qps")},
			&cli.IntFlag{Name: "kube-burst", Value: 100, Usage: "Kubernetes API burst", EnvVars: env("kube-burst")},
			&cli.IntFlag{Name: "workers", Value: 8, Usage: "resources applied in parallel", EnvVars: env("workers")},
			&cli.DurationFlag{Name: "resync-interval", Value: 5 * time.Minute, Usage: "periodic full resync (0 or negative: off)", EnvVars: env("resync-interval")},
			&cli.BoolFlag{Name: "leader-elect", Value: true, Usage: "apply only while holding the region's Lease, so a second replica stands by", EnvVars: env("leader-elect")},
			&cli.StringFlag{Name: "namespace", Value: "default", Usage: "namespace of the leader-election Lease (usually the agent's own); reserved: nothing is applied there", EnvVars: append(env("namespace"), "POD_NAMESPACE")},
			&cli.StringFlag{Name: "reserved-namespaces", Usage: "comma-separated namespace `names` the agent never writes into nor deletes from, besides kube-*, *-system, default, deploysync, common add-ons' namespaces (naming.AddOnNamespaces) and --namespace (always reserved); " +
				"whatever the stream says, it writes only into namespaces labeled unkey.managed.by=krane (it creates them so), and an apply anywhere else is refused and reported as the resource's error", EnvVars: env("reserved-namespaces")},
			&cli.StringFlag{Name: "metrics-listen", Value: ":9091", Usage: "address for /metrics, /healthz (alive) and /readyz (standing by for the lease, or streaming with a full sync done) (empty: off)", EnvVars: env("metrics-listen")},
			&cli.StringFlag{Name: "prometheus-url", Usage: "the region's own Prometheus (`URL`, e.g. http://prometheus.monitoring:9090), which the agent asks for its rollouts' metric and alert checks; without it every check of the region has no verdict, which holds its rollouts until their deadline fails them", EnvVars: env("prometheus-url")},
			&cli.DurationFlag{Name: "prometheus-timeout", Value: 5 * time.Second, Usage: "how long one check's query may take; a slower answer is no answer (no verdict)", EnvVars: env("prometheus-timeout")},
			&cli.IntFlag{Name: "prometheus-concurrency", Value: 4, Usage: "check queries in flight at once; more wait for the next round", EnvVars: env("prometheus-concurrency")},
			&cli.StringFlag{Name: "live-views", Value: string(liveview.Logs), Usage: "(logs, pods or off) what on-call engineers may see of this cluster's deployments through ctrld, asked and answered over the agent's own connection (they need no cluster credentials): " +
				"`MODE`: logs (each deployment's Pods, its objects' recent events and its containers' logs), pods (Pods and events only: logs can carry secrets) or off (nothing: the agent never opens the live-view stream). " +
				"Whatever ctrld asks, the agent shows only the objects it manages for the deployment asked, in namespaces that are its own, never in a reserved one; at most 8 answers at once (4 of them following a log), 1 MiB of log each", EnvVars: env("live-views")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
		}),
		Action: run,
	}
}

func run(c *cli.Context) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	liveViews, err := liveview.ParseServes(c.String("live-views"))
	if err != nil {
		return fmt.Errorf("--live-views: %w", err)
	}

	// In a pod the token file is a Secret volume: root's, readable by the
	// pod's fsGroup (deploy/k8s/agentd.yaml).
	token, err := dial.Token(c.String("token"), c.String("token-file"), dial.AllowSecretVolume())
	if err != nil {
		return err
	}
	if token == "" {
		return errors.New("an agent token is required: --token or --token-file (create one with `ctrld token create --region R`)")
	}
	conn, err := dial.Ctrld(dial.FromFlags(c, token))
	if err != nil {
		return err
	}
	defer conn.Close()

	kcfg, err := kubeConfig(c.String("kubeconfig"))
	if err != nil {
		return err
	}
	kcfg.QPS, kcfg.Burst = float32(c.Float64("kube-qps")), c.Int("kube-burst")
	kcfg.UserAgent = "agentd/" + version
	clients, err := agent.ClientsFor(kcfg)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	readiness := &agent.Readiness{}
	if addr := c.String("metrics-listen"); addr != "" {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		// Ready: standing by for the lease, or applying from a stream that
		// is up and has completed a full sync.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := readiness.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(lis)
		defer srv.Close()
	}

	resync := c.Duration("resync-interval")
	if resync == 0 {
		// Off, as the flag says; a zero agent.Config field means the default.
		resync = -1
	}
	log.Info("agentd starting", "region", c.String("region"), "identity", c.String("identity"),
		"ctrld", c.String("ctrld-address"), "leader_elect", c.Bool("leader-elect"), "version", version)
	return agent.Run(c.Context, agent.Config{
		Region:             c.String("region"),
		Identity:           c.String("identity"),
		Workers:            c.Int("workers"),
		ResyncInterval:     resync,
		Version:            version,
		LeaderElect:        c.Bool("leader-elect"),
		LeaseNamespace:     c.String("namespace"),
		ReservedNamespaces: strings.Split(c.String("reserved-namespaces"), ","),
		Readiness:          readiness,
		LiveViews:          liveViews,
		Checks: checks.Config{PrometheusURL: c.String("prometheus-url"), Timeout: c.Duration("prometheus-timeout"),
			Concurrency: c.Int("prometheus-concurrency")},
	}, clients, ctrlv1.NewClusterServiceClient(conn), log, m)
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
