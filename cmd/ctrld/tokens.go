package main

import (
	"cmp"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/store"
)

// tokenListCommand is `ctrld token list`: the tokens' IDs, what revoke
// takes, with what tells them apart.
func tokenListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the live tokens: ID (what `ctrld token revoke` takes), kind, name, region, whether it may read logs, creation time",
		Flags: []cli.Flag{
			databaseFlag,
			&cli.BoolFlag{Name: "all", Usage: "list revoked tokens too, with when they were revoked", EnvVars: []string{"CTRLD_TOKEN_LIST_ALL"}},
		},
		Action: func(c *cli.Context) error {
			db, err := store.Open(c.Context, c.String(databaseFlag.Name))
			if err != nil {
				return err
			}
			defer db.Close()
			tokens, err := auth.List(c.Context, db.Ent, c.Bool("all"))
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tNAME\tREGION\tLOGS\tCREATED\tREVOKED")
			for _, t := range tokens {
				revoked := "-"
				if t.RevokedAt != nil {
					revoked = t.RevokedAt.UTC().Format(time.RFC3339)
				}
				logs := "no"
				if t.Logs {
					logs = "yes"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, printable(t.Name), cmp.Or(t.Region, "-"), logs,
					t.CreatedAt.UTC().Format(time.RFC3339), revoked)
			}
			return w.Flush()
		},
	}
}

// printable is s, quoted when it holds a space or a character a terminal
// would act on (a name is free text), so each row stays one row.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
