package cmdline

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// sessionOperator is the App.Metadata key of the operator client a
// session's commands call (see SessionApp).
const sessionOperator = "session-operator"

// SessionApp is the one-shot commands as an SSH session runs them
// (`ssh -p 2222 host regions --output json`): the same commands, output and
// errors as unkey-tui's, calling op, the session's own client, instead of
// dialing ctrld with a token. It has no connection flags (the session is
// the connection), reads no environment variable of the serving process,
// and never exits the process: run it with Run; a failure is its error.
func SessionApp(op ctrlv1.OperatorServiceClient, stdout, stderr io.Writer) *cli.App {
	output := outputFlag().(*cli.StringFlag)
	output.EnvVars = nil // the server's environment is not the person's
	a := &cli.App{
		DisableSliceFlagSeparator: true,
		Name:                      "ssh HOST",
		HelpName:                  "ssh HOST",
		Usage:                     "the deploysync one-shot commands over SSH, as the person whose key this is",
		Flags:                     []cli.Flag{output},
		Before:                    checkOutput,
		Commands:                  scriptCommands(),
		Writer:                    stdout,
		ErrWriter:                 stderr,
		Metadata:                  map[string]any{sessionOperator: op},
		// urfave/cli would os.Exit on an error carrying an exit code:
		// that would be the server's process.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			cli.HelpPrinter(c.App.ErrWriter, cli.AppHelpTemplate, c.App)
			return fmt.Errorf("unknown command %q (the commands are listed above)", c.Args().First())
		},
	}
	ownHelp(a)
	a.OnUsageError = usageOnStderr(cli.AppHelpTemplate, a)
	onUsageErrorOnStderr(a.Commands)
	return a
}
