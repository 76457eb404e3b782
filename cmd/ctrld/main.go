// Command ctrld is deploysync's control plane. See `ctrld --help`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/naming"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "ctrld:", err)
		os.Exit(1)
	}
}

var (
	databaseFlag = &cli.StringFlag{
		Name:     "database-dsn",
		Usage:    "MySQL/MariaDB DSN, go-sql-driver syntax: `user:pass@tcp(host:3306)/dbname`",
		EnvVars:  []string{"CTRLD_DATABASE_DSN"},
		Required: true,
	}
	logLevelFlag = &cli.StringFlag{
		Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"CTRLD_LOG_LEVEL"},
	}
	logFormatFlag = &cli.StringFlag{
		Name: "log-format", Value: "text", Usage: "text or json", EnvVars: []string{"CTRLD_LOG_FORMAT"},
	}
	reservedFlag = &cli.StringFlag{
		Name: "reserved-namespaces",
		Usage: "comma-separated namespace `names` no workspace/environment may have, besides kube-*, default and deploysync (always reserved): " +
			"deploys, sentinels and policies whose <workspace>-<environment> is one of them are refused (InvalidArgument). " +
			"List the agents' namespace here if they do not run in deploysync, and any namespace of your own with a hyphen (cert-manager, ...). " +
			"Existing resources in a namespace reserved later are logged as errors at start and left as they are",
		EnvVars: []string{"CTRLD_RESERVED_NAMESPACES"},
	}
)

// reservedNamespaces is the rule --reserved-namespaces makes.
func reservedNamespaces(c *cli.Context) (naming.Reserved, error) {
	r, err := naming.NewReserved(strings.Split(c.String(reservedFlag.Name), ",")...)
	if err != nil {
		return naming.Reserved{}, fmt.Errorf("--%s: %w", reservedFlag.Name, err)
	}
	return r, nil
}

func app() *cli.App {
	return &cli.App{
		Name:  "ctrld",
		Usage: "deploysync control plane: desired state in MySQL, streamed to one agent per region",
		Description: "ctrld keeps deployments, sentinels and Cilium policies per region in MySQL/MariaDB and\n" +
			"streams every change to the region's agent (agentd) over gRPC. Run `ctrld migrate` once,\n" +
			"create tokens with `ctrld token create`, then `ctrld serve`. Every flag can also be set\n" +
			"through the environment variable shown next to it.",
		Commands: []*cli.Command{serveCommand(), migrateCommand(), tokenCommand()},
	}
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create or update the database schema (safe to run repeatedly; never drops)",
		Flags: []cli.Flag{databaseFlag, reservedFlag},
		Action: func(c *cli.Context) error {
			reserved, err := reservedNamespaces(c)
			if err != nil {
				return err
			}
			db, err := store.Open(c.Context, c.String(databaseFlag.Name))
			if err != nil {
				return err
			}
			defer db.Close()
			if err := migrate(c.Context, db, reserved, slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, "schema is up to date")
			return nil
		},
	}
}

// migrate brings the schema up to date, then claims the namespaces in use
// (claimNamespaces).
func migrate(ctx context.Context, db *store.DB, reserved naming.Reserved, log *slog.Logger) error {
	if err := store.Migrate(ctx, db.Ent); err != nil {
		return err
	}
	return claimNamespaces(ctx, db, reserved, log)
}

// claimNamespaces claims the namespace of every workspace and environment
// already in use (databases written before namespaces were claimed), and
// reports claims whose namespace is reserved now. Pairs that already share
// a namespace, and claims of reserved namespaces, are logged as errors;
// they need an operator, not a refusal to start, and nothing is rewritten.
func claimNamespaces(ctx context.Context, db *store.DB, reserved naming.Reserved, log *slog.Logger) error {
	if _, err := desired.ClaimExistingNamespaces(ctx, db.Ent, log); err != nil {
		return fmt.Errorf("claim the namespaces in use: %w", err)
	}
	if _, err := desired.ReportReservedClaims(ctx, db.Ent, reserved, log); err != nil {
		return fmt.Errorf("report claims of reserved namespaces: %w", err)
	}
	return nil
}

func serveCommand() *cli.Command {
	env := func(name string) []string {
		return []string{"CTRLD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
	}
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the cluster (agents) and operator (console, CLI) gRPC APIs",
		Flags: []cli.Flag{
			databaseFlag, logLevelFlag, logFormatFlag, reservedFlag,
			&cli.StringFlag{Name: "listen", Value: ":7070", Usage: "gRPC listen address; without --tls-cert a loopback one (127.0.0.1:7070, [::1]:7070, localhost:7070) unless --insecure-listen", EnvVars: env("listen")},
			&cli.BoolFlag{Name: "insecure-listen", Usage: "serve without TLS on a non-loopback --listen address: tokens cross the network in the clear (only behind a TLS-terminating proxy or on a network you trust)", EnvVars: env("insecure-listen")},
			&cli.StringFlag{Name: "metrics-listen", Value: ":9090", Usage: "address for /metrics, /healthz and /readyz (empty: off)", EnvVars: env("metrics-listen")},
			&cli.StringFlag{Name: "tls-cert", Usage: "TLS certificate `file` (PEM); with --tls-key enables TLS", EnvVars: env("tls-cert")},
			&cli.StringFlag{Name: "tls-key", Usage: "TLS private key `file` (PEM)", EnvVars: env("tls-key")},
			&cli.StringFlag{Name: "tls-client-ca", Usage: "CA `file` (PEM): require client certificates signed by it", EnvVars: env("tls-client-ca")},
			&cli.StringFlag{Name: "advertise-addr", Usage: "`host[:port]` the other ctrld replicas on this database dial to reach this one itself, not a load balancer (e.g. the pod's IP; the port defaults to --listen's). " +
				"Replicas register in the table ctrld_replicas and poke each other after a write, so a change reaches every replica's agents at once. " +
				"Empty: off; a change written through another replica then reaches this one's agents at its next poll, up to --poll-interval later. With --tls-cert, replicas dial each other with TLS (see --peer-ca)", EnvVars: env("advertise-addr")},
			&cli.StringFlag{Name: "peer-ca", Usage: "CA `file` (PEM) that the other replicas' certificates are verified with when ctrld serves TLS (default: the system's roots). With --tls-client-ca, this replica presents its --tls-cert to them, which must then be signed by that CA and allow client authentication", EnvVars: env("peer-ca")},
			&cli.StringFlag{Name: "peer-server-name", Usage: "`name` the other replicas' certificates are verified for (default: the host of each one's --advertise-addr), when their certificates name a service rather than each replica's address", EnvVars: env("peer-server-name")},
			&cli.DurationFlag{Name: "stream-send-timeout", Value: stream.Defaults.SendTimeout, Usage: "a stream whose client reads nothing for this long while events wait is ended and its connection closed (logged, counted in deploysync_stream_stalled_total); the agent dials again and resumes from its last bookmark", EnvVars: env("stream-send-timeout")},
			&cli.IntFlag{Name: "max-full-syncs", Value: stream.Defaults.MaxFullSyncs, Usage: "full syncs reading a page from the database at once; more wait for a slot, holding nothing (a full sync waiting on its client holds no slot)", EnvVars: env("max-full-syncs")},
			&cli.IntFlag{Name: "max-streams-per-token", Value: stream.Defaults.MaxStreamsPerToken, Usage: "open streams one agent token may have; more are refused with ResourceExhausted", EnvVars: env("max-streams-per-token")},
			&cli.IntFlag{Name: "max-agents-per-region", Value: cluster.Defaults.MaxAgentsPerRegion, Usage: "agent records (identities) one region may have; a new identity beyond it takes the place of a record silent for 10m, or is refused with ResourceExhausted", EnvVars: env("max-agents-per-region")},
			&cli.IntFlag{Name: "max-streams", Value: stream.Defaults.MaxStreams, Usage: "open streams this replica serves; more are refused with ResourceExhausted (agents retry, or reach another replica)", EnvVars: env("max-streams")},
			&cli.StringFlag{Name: "instance", Usage: "name of this replica in agents' connection records (default: host/pid)", EnvVars: env("instance")},
			&cli.DurationFlag{Name: "poll-interval", Value: tailer.Defaults.PollInterval, Usage: "how often the tailer reads deployment_changes", EnvVars: env("poll-interval")},
			&cli.DurationFlag{Name: "token-recheck", Value: server.DefaultTokenRecheck, Usage: "how often the tokens of running streams are checked again: a revoked agent token's stream ends within this", EnvVars: env("token-recheck")},
			&cli.DurationFlag{Name: "database-unavailable-after", Usage: "when no read of the change log has succeeded for this long (failed or hung), every stream ends and client connections are closed (agents dial again, behind a load balancer to a replica whose database answers), new streams are refused and gRPC health and /readyz say not serving, until a read succeeds. 0 (default): 5s on a Galera node, where another replica may reach the cluster through another node; off on a single database server, where no replica could serve meanwhile and ending streams would only delay the agents' return. Negative: off", EnvVars: env("database-unavailable-after")},
			&cli.DurationFlag{Name: "hole-grace", Value: tailer.Defaults.HoleGrace, Usage: "how long a pk gap may stay open before the filler settles it (bounds how long a rollback holds resume versions)", EnvVars: env("hole-grace")},
			&cli.DurationFlag{Name: "filler-lock-wait", Value: tailer.Defaults.FillerLockWait, Usage: "how long one filler attempt waits behind an open transaction", EnvVars: env("filler-lock-wait")},
			&cli.DurationFlag{Name: "change-ttl", Value: retention.Defaults.TTL, Usage: "how long deployment_changes rows are kept", EnvVars: env("change-ttl")},
			&cli.DurationFlag{Name: "change-max-age", Value: retention.Defaults.MaxAge, Usage: "how long rows are kept for a lagging agent at most", EnvVars: env("change-max-age")},
			&cli.IntFlag{Name: "revisions-kept", Value: retention.Defaults.RevisionsKept, Usage: "how many of each deployment's newest revisions (its history, what rollback can restore) are kept", EnvVars: env("revisions-kept")},
			&cli.DurationFlag{Name: "agent-ttl", Value: retention.Defaults.AgentTTL, Usage: "an agent record nothing was heard of (heartbeat, stream, update) for this long is deleted", EnvVars: env("agent-ttl")},
			&cli.DurationFlag{Name: "cleanup-interval", Value: retention.Defaults.Interval, Usage: "how often retention runs (one replica at a time)", EnvVars: env("cleanup-interval")},
			&cli.DurationFlag{Name: "deploy-timeout", Value: workflow.Defaults.Timeout, Usage: "a deployment not ready within this fails", EnvVars: env("deploy-timeout")},
			&cli.BoolFlag{Name: "migrate", Value: true, Usage: "migrate the schema before serving", EnvVars: env("migrate")},
		},
		Action: func(c *cli.Context) error {
			log, err := newLogger(c.String(logLevelFlag.Name), c.String(logFormatFlag.Name))
			if err != nil {
				return err
			}
			if (c.String("tls-cert") == "") != (c.String("tls-key") == "") {
				return fmt.Errorf("--tls-cert and --tls-key go together")
			}
			for _, peerFlag := range []string{"peer-ca", "peer-server-name"} {
				if c.String(peerFlag) == "" {
					continue
				}
				if c.String("advertise-addr") == "" || c.String("tls-cert") == "" {
					return fmt.Errorf("--%s says how replicas verify each other over TLS: it needs --advertise-addr (peer pokes on) and --tls-cert (TLS)", peerFlag)
				}
			}
			// The clients' rule (internal/dial): plaintext stays on this
			// machine unless someone said otherwise.
			if listen := c.String("listen"); c.String("tls-cert") == "" && !dial.Loopback(listen) {
				if !c.Bool("insecure-listen") {
					return fmt.Errorf("--listen %q is not a loopback address, and without TLS every token would cross the network in the clear: "+
						"give --tls-cert and --tls-key, listen on loopback (--listen 127.0.0.1:7070), or accept it with --insecure-listen", listen)
				}
				log.Warn("serving without TLS on a non-loopback address (--insecure-listen): tokens cross the network in the clear", "listen", listen)
			}
			reserved, err := reservedNamespaces(c)
			if err != nil {
				return err
			}
			db, err := store.Open(c.Context, c.String(databaseFlag.Name))
			if err != nil {
				return err
			}
			defer db.Close()
			if c.Bool("migrate") {
				if err := migrate(c.Context, db, reserved, log); err != nil {
					return err
				}
			} else if err := claimNamespaces(c.Context, db, reserved, log); err != nil {
				// Replicas of an older ctrld may have written resources
				// without claiming their namespace; claim them now.
				return err
			}
			srv, err := server.Start(c.Context, db, server.Config{
				ListenAddr:     c.String("listen"),
				MetricsAddr:    c.String("metrics-listen"),
				TLSCert:        c.String("tls-cert"),
				TLSKey:         c.String("tls-key"),
				TLSClientCA:    c.String("tls-client-ca"),
				Peers:          peers.Config{AdvertiseAddr: c.String("advertise-addr")},
				PeerCA:         c.String("peer-ca"),
				PeerServerName: c.String("peer-server-name"),
				Instance:       c.String("instance"),
				TokenRecheck:   c.Duration("token-recheck"),
				Tailer: tailer.Config{
					PollInterval:     c.Duration("poll-interval"),
					HoleGrace:        c.Duration("hole-grace"),
					FillerLockWait:   c.Duration("filler-lock-wait"),
					UnavailableAfter: c.Duration("database-unavailable-after"),
				},
				Cluster: cluster.Config{MaxAgentsPerRegion: c.Int("max-agents-per-region")},
				Stream: stream.Config{
					SendTimeout:        c.Duration("stream-send-timeout"),
					MaxFullSyncs:       c.Int("max-full-syncs"),
					MaxStreamsPerToken: c.Int("max-streams-per-token"),
					MaxStreams:         c.Int("max-streams"),
				},
				Retention: retention.Config{TTL: c.Duration("change-ttl"), MaxAge: c.Duration("change-max-age"), Interval: c.Duration("cleanup-interval"),
					AgentTTL: c.Duration("agent-ttl"), RevisionsKept: c.Int("revisions-kept")},
				Workflow: workflow.Config{Timeout: c.Duration("deploy-timeout")},
				Reserved: reserved,
			}, log)
			if err != nil {
				return err
			}
			<-c.Context.Done()
			log.Info("shutting down")
			srv.Stop()
			return nil
		},
	}
}

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "issue and revoke API tokens (shown once; only a hash is stored)",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "issue a token: --region R for an agent, --operator NAME for a person or script",
				Flags: []cli.Flag{
					databaseFlag,
					&cli.StringFlag{Name: "region", Usage: "issue an agent token bound to this region (registers the region)", EnvVars: []string{"CTRLD_TOKEN_REGION"}},
					&cli.StringFlag{Name: "operator", Usage: "issue an operator token; actions are audited under this `name`", EnvVars: []string{"CTRLD_TOKEN_OPERATOR"}},
					&cli.StringFlag{Name: "name", Usage: "label for an agent token (default: agent-REGION)", EnvVars: []string{"CTRLD_TOKEN_NAME"}},
				},
				Action: func(c *cli.Context) error {
					region, operator := c.String("region"), c.String("operator")
					if (region == "") == (operator == "") {
						return fmt.Errorf("give exactly one of --region (agent token) or --operator (operator token)")
					}
					db, err := store.Open(c.Context, c.String(databaseFlag.Name))
					if err != nil {
						return err
					}
					defer db.Close()
					kind, name := apitoken.KindOperator, operator
					if region != "" {
						kind, name = apitoken.KindAgent, c.String("name")
						if name == "" {
							name = "agent-" + region
						}
					}
					token, err := auth.Create(c.Context, db.Ent, kind, name, region)
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, token)
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke every token with this name",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					databaseFlag,
					&cli.BoolFlag{Name: "operator", Usage: "the name is an operator's (default: an agent token's)", EnvVars: []string{"CTRLD_TOKEN_REVOKE_OPERATOR"}},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want exactly one token NAME")
					}
					db, err := store.Open(c.Context, c.String(databaseFlag.Name))
					if err != nil {
						return err
					}
					defer db.Close()
					kind := apitoken.KindAgent
					if c.Bool("operator") {
						kind = apitoken.KindOperator
					}
					n, err := auth.Revoke(c.Context, db.Ent, kind, c.Args().First())
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "revoked %d token(s)\n", n)
					return nil
				},
			},
		},
	}
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", format)
}
