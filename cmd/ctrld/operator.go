package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/operatorkeys"
	"github.com/deploysync/deploysync/daemon/store"
)

// operatorCommand manages the operators' SSH keys: who may open the console
// over `ctrld serve --ssh-listen`, under which name and role.
func operatorCommand() *cli.Command {
	// withKeys opens the database for one command. Its arguments are
	// checked by the command before this runs, so bad input opens nothing.
	withKeys := func(c *cli.Context, fn func(*operatorkeys.Registry) error) error {
		db, err := store.Open(c.Context, c.String(databaseFlag.Name))
		if err != nil {
			return err
		}
		defer db.Close()
		return fn(operatorkeys.New(db.Ent))
	}
	return &cli.Command{
		Name:  "operator",
		Usage: "register operators' SSH public keys for the console over SSH (ctrld serve --ssh-listen)",
		Subcommands: []*cli.Command{
			{
				Name:      "add-key",
				Usage:     "register a public key (e.g. ~/.ssh/id_ed25519.pub) for the operator NAME",
				ArgsUsage: "NAME FILE",
				Flags: []cli.Flag{
					databaseFlag,
					&cli.StringFlag{Name: "role", Required: true, Usage: "read-only (sees everything, changes nothing) or operator (may act)"},
					&cli.BoolFlag{Name: "logs", Usage: "may also read pods' logs (unkey-tui logs, the console's log page): logs may carry secrets, so this is a grant of its own, for either role; every read is audited"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return fmt.Errorf("want NAME and a public key FILE, got %d argument(s)", c.NArg())
					}
					name, file := c.Args().Get(0), c.Args().Get(1)
					role, err := operatorkeys.ParseRole(c.String("role"))
					if err != nil {
						return fmt.Errorf("--%w", err)
					}
					data, err := os.ReadFile(file)
					if err != nil {
						return err
					}
					key, err := operatorkeys.ParseKey(data)
					if err != nil {
						return fmt.Errorf("%s %w", file, err)
					}
					return withKeys(c, func(r *operatorkeys.Registry) error {
						k, err := r.Add(c.Context, name, role, c.Bool("logs"), key)
						if err != nil {
							return err
						}
						grant := ""
						if k.Logs {
							grant = ", may read logs"
						}
						fmt.Fprintf(c.App.Writer, "registered %s for %s (%s%s)\n", k.Fingerprint, k.Name, k.Role, grant)
						return nil
					})
				},
			},
			{
				Name:  "list-keys",
				Usage: "print every registered key: name, role, fingerprint, when it was added",
				Flags: []cli.Flag{databaseFlag},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return fmt.Errorf("list-keys takes no arguments, got %q", c.Args().Slice())
					}
					return withKeys(c, func(r *operatorkeys.Registry) error {
						keys, err := r.List(c.Context)
						if err != nil {
							return err
						}
						w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
						fmt.Fprintln(w, "NAME\tROLE\tLOGS\tFINGERPRINT\tADDED")
						for _, k := range keys {
							logs := "no"
							if k.Logs {
								logs = "yes"
							}
							fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.Name, k.Role, logs, k.Fingerprint, k.CreatedAt)
						}
						return w.Flush()
					})
				},
			},
			{
				Name:      "remove-key",
				Usage:     "remove the key with this fingerprint (SHA256:…), or every key of the operator NAME; their open console sessions end within seconds",
				ArgsUsage: "FINGERPRINT|NAME",
				Flags:     []cli.Flag{databaseFlag},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want exactly one FINGERPRINT (SHA256:…) or operator NAME, got %d argument(s)", c.NArg())
					}
					return withKeys(c, func(r *operatorkeys.Registry) error {
						n, err := r.Remove(c.Context, c.Args().First())
						if err != nil {
							return err
						}
						fmt.Fprintf(c.App.Writer, "removed %d key(s)\n", n)
						return nil
					})
				},
			},
		},
	}
}
