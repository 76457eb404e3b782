package cmdline

import "github.com/urfave/cli/v2"

// ownHelp gives a, and each of its commands, a help flag and a help
// command of its own instead of urfave/cli's. Those are package globals
// that every run writes to: a BoolFlag's Apply sets fields of the global
// HelpFlag, and a command's setup sets fields of the global help command
// it appends to its subcommands. One-shot commands of concurrent SSH
// sessions, each in an App of its own, raced on them (seen under -race).
// What help shows is unchanged.
func ownHelp(a *cli.App) {
	a.HideHelp, a.HideHelpCommand = true, true
	a.Flags = append(a.Flags, helpFlag())
	a.Commands = append(withOwnHelp(a.Commands), helpCommand())
}

// withOwnHelp is ownHelp for cmds and their subcommands, all the way down.
func withOwnHelp(cmds []*cli.Command) []*cli.Command {
	for _, c := range cmds {
		c.HideHelp, c.HideHelpCommand = true, true
		c.Flags = append(c.Flags, helpFlag())
		if len(c.Subcommands) > 0 {
			c.Subcommands = append(withOwnHelp(c.Subcommands), helpCommand())
		}
	}
	return cmds
}

// helpFlag is cli.HelpFlag as a flag of its own.
func helpFlag() cli.Flag {
	return &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "show help", DisableDefaultText: true}
}

// helpCommand is urfave/cli's help command as a command of its own: help
// on the commands beside it, or on the one it names.
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Aliases:   []string{"h"},
		Usage:     "Shows a list of commands or help for one command",
		ArgsUsage: "[command]",
		HideHelp:  true,
		Action: func(c *cli.Context) error {
			lineage := c.Lineage() // help, what it is beside, ...
			parent := lineage[1]
			if c.Args().Present() {
				return cli.ShowCommandHelp(parent, c.Args().First())
			}
			if len(lineage) < 3 || lineage[2].App == nil { // beside the app's commands
				return cli.ShowAppHelp(parent)
			}
			return cli.ShowSubcommandHelp(parent)
		},
	}
}
