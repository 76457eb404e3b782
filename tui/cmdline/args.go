package cmdline

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// Run runs a (App) on a command line as the shell gave it (os.Args). With
// --output json, a command that fails also prints its error document on
// stdout; the caller prints the error on stderr.
func Run(a *cli.App, args []string) error {
	return RunContext(context.Background(), a, args)
}

// RunContext is Run whose calls end when ctx does (an SSH session whose
// key was removed).
func RunContext(ctx context.Context, a *cli.App, args []string) error {
	err := a.RunContext(ctx, flagsFirst(a, args))
	if err != nil && a.Metadata["output"] == outputJSON {
		_ = writeJSON(a.Writer, errorDocument(err)) // stderr has it anyway
	}
	return err
}

// flagsFirst returns args (os.Args form) with every flag in front of the
// positional arguments of its command, so that `stop api --region eu`
// means what it says: urfave/cli v2 stops reading flags at the first
// positional argument, and would take "--region" and "eu" for two more
// arguments. A global flag given after the command moves in front of the
// command. A command with subcommands (`rollout strategy set`) is followed
// down to the subcommand the arguments name, whose flags they are (the
// commands above it take none). "--" ends the flags, as usual; the
// positional arguments follow one "--", so that one starting with "-" (a
// negative number) stays an argument. A line without a known command is
// left as it is.
func flagsFirst(a *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	global, rest := leadingFlags(a.Flags, args[1:])
	if len(rest) == 0 || rest[0] == "--" {
		return args
	}
	cmd := a.Command(rest[0])
	if cmd == nil {
		return args
	}
	path := []string{rest[0]}
	var own, positional []string
	for i := 1; i < len(rest); i++ {
		arg := rest[i]
		if arg == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if !isFlag(arg) {
			if sub := subcommand(cmd, arg); sub != nil && len(positional) == 0 {
				cmd, path = sub, append(path, arg)
				continue
			}
			positional = append(positional, arg)
			continue
		}
		// Unknown flags stay with the command, whose parser names them.
		to, flags := &own, commandFlags(cmd)
		if lookup(flags, arg) == nil && lookup(a.Flags, arg) != nil {
			to, flags = &global, a.Flags
		}
		*to = append(*to, arg)
		if takesValue(flags, arg) && i+1 < len(rest) {
			i++
			*to = append(*to, rest[i])
		}
	}
	out := append([]string{args[0]}, global...)
	out = append(append(out, path...), own...)
	if len(positional) > 0 {
		out = append(append(out, "--"), positional...)
	}
	return out
}

// CommandName is the command a command line (args, without the
// program's name) runs in a: "regions", "rollout promote", or "" when it
// names none. It is made of a's command names only, never of an
// argument or a flag's value, so it may be logged: a flag given first
// (`--env=DB_PASSWORD=…`) is not the command.
func CommandName(a *cli.App, args []string) string {
	_, rest := leadingFlags(a.Flags, args)
	if len(rest) == 0 {
		return ""
	}
	cmd := a.Command(rest[0])
	if cmd == nil {
		return ""
	}
	path, flags := []string{cmd.Name}, commandFlags(cmd)
	for i := 1; i < len(rest) && rest[i] != "--"; i++ {
		if isFlag(rest[i]) {
			if takesValue(flags, rest[i]) || lookup(flags, rest[i]) == nil && takesValue(a.Flags, rest[i]) {
				i++
			}
			continue
		}
		sub := subcommand(cmd, rest[i])
		if sub == nil {
			break
		}
		cmd, path = sub, append(path, sub.Name)
	}
	return strings.Join(path, " ")
}

// subcommand is cmd's subcommand named name, nil when it has none.
func subcommand(cmd *cli.Command, name string) *cli.Command {
	for _, sub := range cmd.Subcommands {
		if sub.HasName(name) {
			return sub
		}
	}
	return nil
}

// commandFlags are the flags of cmd and of every command below it: a
// flag given before its subcommand's name (`rollout strategy --wave x
// set ...`) is still known, and so is whether it takes a value.
func commandFlags(cmd *cli.Command) []cli.Flag {
	flags := slices.Clone(cmd.Flags)
	for _, sub := range cmd.Subcommands {
		flags = append(flags, commandFlags(sub)...)
	}
	return flags
}

// leadingFlags splits args into the flags (with their values) before the
// first positional argument or "--", and the rest.
func leadingFlags(flags []cli.Flag, args []string) (lead, rest []string) {
	i := 0
	for i < len(args) && isFlag(args[i]) {
		if takesValue(flags, args[i]) && i+1 < len(args) {
			i++
		}
		i++
	}
	return slices.Clone(args[:i]), args[i:]
}

// isFlag tells a flag ("-x", "--name", "--name=value") from an argument;
// a negative number is an argument.
func isFlag(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return false
	}
	_, err := strconv.ParseFloat(arg, 64)
	return err != nil
}

// lookup finds the flag arg names, nil when none of flags has that name.
func lookup(flags []cli.Flag, arg string) cli.Flag {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// takesValue tells whether arg is a known flag whose value is the next
// argument (not a boolean, not written --name=value).
func takesValue(flags []cli.Flag, arg string) bool {
	f, ok := lookup(flags, arg).(cli.DocGenerationFlag)
	return ok && f.TakesValue() && !strings.Contains(arg, "=")
}
