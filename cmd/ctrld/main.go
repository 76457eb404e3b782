// Command ctrld is deploysync's control plane. See `ctrld --help`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent/apitoken"
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
)

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
		Flags: []cli.Flag{databaseFlag},
		Action: func(c *cli.Context) error {
			db, err := store.Open(c.Context, c.String(databaseFlag.Name))
			if err != nil {
				return err
			}
			defer db.Close()
			if err := migrate(c.Context, db, slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, "schema is up to date")
			return nil
		},
	}
}

// migrate brings the schema up to date, then claims the namespace of every
// workspace and environment already in use (databases written before
// namespaces were claimed). Pairs that already share a namespace are logged
// as errors by ClaimExistingNamespaces; they need an operator, not a refusal
// to start.
func migrate(ctx context.Context, db *store.DB, log *slog.Logger) error {
	if err := store.Migrate(ctx, db.Ent); err != nil {
		return err
	}
	if _, err := desired.ClaimExistingNamespaces(ctx, db.Ent, log); err != nil {
		return fmt.Errorf("claim the namespaces in use: %w", err)
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
		if err := migrate(ctx, db, log); err != nil {
			return err
		}
	} else if _, err := desired.ClaimExistingNamespaces(ctx, db.Ent, log); err != nil {
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
