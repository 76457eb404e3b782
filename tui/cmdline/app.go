package cmdline

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/internal/dial"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// env names the environment variables of a global flag: UNKEY_TUI_NAME.
func env(name string) []string {
	return []string{"UNKEY_TUI_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// App is unkey-tui's command line: the console when no command is given,
// else one of the one-shot commands. Run it with Run.
func App() *cli.App {
	a := &cli.App{
		// A value is never split at commas: --env DSN=host=db,user=app
		// is one variable. Repeat a flag for several values.
		DisableSliceFlagSeparator: true,
		Name:                      "unkey-tui",
		Usage:                     "the deploysync operator console (no command) and script commands on the same operator API",
		Description: "Shows every region's agent, cursor and lag (worst first), a region's pending changes and\n" +
			"deployments, and lets you force a resync, pause/resume a region and stop/start a deployment,\n" +
			"each after a confirmation. Keyboard only; ? shows all keys; q quits. Every flag can also be\n" +
			"set through the environment variable shown; NO_COLOR turns colors off.",
		Flags: slices.Concat(dial.Flags(env), []cli.Flag{
			&cli.StringFlag{Name: "token", Usage: "operator token, from: ctrld token create --operator NAME (prefer --token-file)", EnvVars: env("token")},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the operator token", EnvVars: env("token-file")},
			&cli.DurationFlag{Name: "refresh", Value: time.Second, Usage: "how often views refresh", EnvVars: env("refresh")},
			outputFlag(),
			// The dev stack's way to tell its console that a component
			// died (scripts/devstack): read only when given, never from
			// the environment.
			&cli.StringFlag{Name: "notices", Hidden: true, Usage: "`directory` whose files each hold one line the console shows on its status line until the file is removed"},
		}),
		Before:   checkOutput,
		Commands: scriptCommands(),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				// A mistyped command must fail, not open the console.
				cli.HelpPrinter(c.App.ErrWriter, cli.AppHelpTemplate, c.App)
				return fmt.Errorf("unknown command %q (the commands are listed above)", c.Args().First())
			}
			conn, err := connect(c)
			if err != nil {
				return err
			}
			defer conn.Close()
			_, noColor := os.LookupEnv("NO_COLOR")
			m := tui.New(ctrlv1.NewOperatorServiceClient(conn), tui.Options{Refresh: c.Duration("refresh"), NoColor: noColor,
				Reconnect: conn.ResetConnectBackoff, Notices: c.String("notices")})
			return tui.Run(c.Context, m, os.Stdout)
		},
	}
	ownHelp(a)
	a.OnUsageError = usageOnStderr(cli.AppHelpTemplate, a)
	onUsageErrorOnStderr(a.Commands)
	return a
}

// connect dials ctrld with the global flags' token and TLS settings.
func connect(c *cli.Context) (*grpc.ClientConn, error) {
	token, err := dial.Token(c.String("token"), c.String("token-file"))
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("an operator token is required: --token or --token-file (create one with `ctrld token create --operator NAME`)")
	}
	return dial.Ctrld(dial.FromFlags(c, token))
}
