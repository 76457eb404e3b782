// Command ctrld is deploysync's control plane. See `ctrld --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "ctrld:", err)
		os.Exit(1)
	}
}

var databaseFlag = &cli.StringFlag{
	Name:     "database-dsn",
	Usage:    "MySQL/MariaDB DSN, go-sql-driver syntax: `user:pass@tcp(host:3306)/dbname`",
	EnvVars:  []string{"CTRLD_DATABASE_DSN"},
	Required: true,
}

func app() *cli.App {
	return &cli.App{
		Name:  "ctrld",
		Usage: "deploysync control plane: desired state in MySQL, streamed to one agent per region",
		Commands: []*cli.Command{
			{
				Name:  "migrate",
				Usage: "create or update the database schema (safe to run repeatedly; never drops)",
				Flags: []cli.Flag{databaseFlag},
				Action: func(c *cli.Context) error {
					client, err := store.Open(c.Context, c.String(databaseFlag.Name))
					if err != nil {
						return err
					}
					defer client.Close()
					if err := store.Migrate(c.Context, client.Ent); err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, "schema is up to date")
					return nil
				},
			},
		},
	}
}
