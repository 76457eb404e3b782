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
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/tui/cmdline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runCtrld(ctx, app(), os.Args); err != nil {
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
		Usage: "comma-separated namespace `names` no workspace/environment may have, besides kube-*, *-system, default, deploysync and common add-ons' namespaces (cert-manager, ingress-nginx, argocd, ...: naming.AddOnNamespaces; always reserved): " +
			"deploys, sentinels and policies whose <workspace>-<environment> is one of them are refused (InvalidArgument). " +
			"List the agents' namespace here if they do not run in deploysync, and any other namespace of your own with a hyphen (monitoring-stack, ...). " +
			"Existing resources in a namespace reserved later are logged as errors at start and left as they are",
		EnvVars: []string{"CTRLD_RESERVED_NAMESPACES"},
	}
)

// reservedNamespaces is the rule a --reserved-namespaces value makes.
func reservedNamespaces(flag string) (naming.Reserved, error) {
	r, err := naming.NewReserved(strings.Split(flag, ",")...)
	if err != nil {
		return naming.Reserved{}, fmt.Errorf("--%s: %w", reservedFlag.Name, err)
	}
	return r, nil
}

// runCtrld runs a (app) on a command line as the shell gave it. Flags may
// follow the arguments, as the docs write them (`ctrld operator add-key
// NAME --role read-only FILE`): urfave/cli v2 alone stops reading flags at
// the first argument. The console's command line reorders them the same
// way, before urfave/cli reads them; "--" still ends the flags.
func runCtrld(ctx context.Context, a *cli.App, args []string) error {
	return cmdline.RunContext(ctx, a, args)
}

func app() *cli.App {
	return &cli.App{
		Name:  "ctrld",
		Usage: "deploysync control plane: desired state in MySQL, streamed to one agent per region",
		Description: "ctrld keeps deployments, sentinels and Cilium policies per region in MySQL/MariaDB and\n" +
			"streams every change to the region's agent (agentd) over gRPC. Run `ctrld migrate` once,\n" +
			"create tokens with `ctrld token create`, then `ctrld serve`. Every flag can also be set\n" +
			"through the environment variable shown next to it.",
		Commands: []*cli.Command{serveCommand(), migrateCommand(), tokenCommand(), operatorCommand()},
	}
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create or update the database schema (safe to run repeatedly; never drops)",
		Flags: []cli.Flag{databaseFlag, reservedFlag},
		Action: func(c *cli.Context) error {
			reserved, err := reservedNamespaces(c.String(reservedFlag.Name))
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

// migrate brings the schema up to date, gives the regions of deployments
// from before rollouts their own copy of the spec, then claims the
// namespaces in use (claimNamespaces).
func migrate(ctx context.Context, db *store.DB, reserved naming.Reserved, log *slog.Logger) error {
	if err := store.Migrate(ctx, db.Ent); err != nil {
		return err
	}
	if n, err := desired.FillTopologySpecs(ctx, db.Ent); err != nil {
		return err
	} else if n > 0 {
		log.Info("migrate: gave regions their deployment's spec", "topologies", n)
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
	o := &serveOptions{}
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the cluster (agents) and operator (console, CLI) gRPC APIs",
		Flags: append(o.flags(), o.sshFlags()...),
		Action: func(c *cli.Context) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return serve(c.Context, o)
		},
	}
}

// serve runs ctrld with o (valid) until ctx ends.
func serve(ctx context.Context, o *serveOptions) error {
	log, err := newLogger(o.LogLevel, o.LogFormat)
	if err != nil {
		return err
	}
	if o.plaintextOffMachine() {
		log.Warn("serving without TLS on a non-loopback address (--insecure-listen): tokens cross the network in the clear", "listen", o.Server.ListenAddr)
	}
	db, err := store.Open(ctx, o.DatabaseDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if o.Migrate {
		if err := migrate(ctx, db, o.Server.Reserved, log); err != nil {
			return err
		}
	} else if err := claimNamespaces(ctx, db, o.Server.Reserved, log); err != nil {
		// Replicas of an older ctrld may have written resources
		// without claiming their namespace; claim them now.
		return err
	}
	srv, err := server.Start(ctx, db, o.Server, log)
	if err != nil {
		return err
	}
	console, err := startSSHConsole(ctx, o.SSH, db, srv, log)
	if err != nil {
		srv.Stop()
		return err
	}
	<-ctx.Done()
	log.Info("shutting down")
	if console != nil {
		console.Stop()
	}
	srv.Stop()
	return nil
}

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "issue, list and revoke API tokens (a token is shown once, only its hash is stored; its ID names it)",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "issue a token: --region R for an agent, --operator NAME for a person or script (--logs: one that may read logs too)",
				Flags: []cli.Flag{
					databaseFlag,
					&cli.StringFlag{Name: "region", Usage: "issue an agent token bound to this region (registers the region)", EnvVars: []string{"CTRLD_TOKEN_REGION"}},
					&cli.StringFlag{Name: "operator", Usage: "issue an operator token; actions are audited under this `name`", EnvVars: []string{"CTRLD_TOKEN_OPERATOR"}},
					&cli.StringFlag{Name: "name", Usage: "label for an agent token (default: agent-REGION)", EnvVars: []string{"CTRLD_TOKEN_NAME"}},
					&cli.BoolFlag{Name: "logs", Usage: "with --operator: the token may also read pods' logs (unkey-tui logs): logs may carry secrets, so this is a grant of its own, for the token's life; every read is audited", EnvVars: []string{"CTRLD_TOKEN_LOGS"}},
				},
				Action: func(c *cli.Context) error {
					region, operator := c.String("region"), c.String("operator")
					if (region == "") == (operator == "") {
						return fmt.Errorf("give exactly one of --region (agent token) or --operator (operator token)")
					}
					if c.Bool("logs") && region != "" {
						return fmt.Errorf("--logs is an operator token's grant (--operator NAME --logs); an agent token reads no logs")
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
					token, err := auth.CreateWith(c.Context, db.Ent, kind, name, region, auth.Grants{Logs: c.Bool("logs")})
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, token)
					grant := ""
					if c.Bool("logs") {
						grant = ", may read logs"
					}
					// Beside the token, not with it: scripts keep the token
					// that stdout alone carries.
					fmt.Fprintf(c.App.ErrWriter, "issued %s %s token %q%s; revoke it with: ctrld token revoke %[1]s\n", auth.TokenID(token), kind, name, grant)
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke one token: by its ID (tok_…, shown at creation and by `ctrld token list`), or by a name exactly one live token has (a name several share is refused, listing their IDs)",
				ArgsUsage: "ID|NAME",
				Flags: []cli.Flag{
					databaseFlag,
					&cli.BoolFlag{Name: "operator", Usage: "a NAME is an operator's (default: an agent token's); an ID needs no kind", EnvVars: []string{"CTRLD_TOKEN_REVOKE_OPERATOR"}},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want exactly one token ID or NAME")
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
					t, err := auth.Revoke(c.Context, db.Ent, kind, c.Args().First())
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "revoked %s\n", t)
					return nil
				},
			},
			tokenListCommand(),
		},
	}
}
