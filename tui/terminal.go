package tui

import (
	"context"
	"errors"
	"os"

	tea "charm.land/bubbletea/v2"
	"golang.org/x/term"
)

// ErrNoTerminal means the console has no terminal to draw on.
var ErrNoTerminal = errors.New("stdout is not a terminal and there is no terminal to open (/dev/tty): " +
	"run unkey-tui in a terminal, or use a script command (unkey-tui --help lists them)")

// Run runs the console until it quits or ctx ends. It draws on stdout
// when that is a terminal; else on the process's own terminal (/dev/tty),
// which `go tool task dev 2>&1 | tee dev.log` still has, as a console that
// drew into the pipe would show nothing at all; else it refuses with
// ErrNoTerminal rather than run blind.
func Run(ctx context.Context, m Model, stdout *os.File) error {
	return run(ctx, m, stdout, tea.OpenTTY)
}

func run(ctx context.Context, m Model, stdout *os.File, openTTY func() (in, out *os.File, err error)) error {
	opts := []tea.ProgramOption{tea.WithContext(ctx)}
	if !term.IsTerminal(int(stdout.Fd())) {
		in, out, err := openTTY()
		if err != nil {
			return errors.Join(ErrNoTerminal, err)
		}
		defer in.Close()
		defer out.Close()
		opts = append(opts, tea.WithInput(in), tea.WithOutput(out))
	}
	_, err := tea.NewProgram(m, opts...).Run()
	return err
}
