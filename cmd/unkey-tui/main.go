// Command unkey-tui is the operator console for deploysync. See
// `unkey-tui --help`; the command line is package tui/cmdline.
package main

import (
	"fmt"
	"os"

	"github.com/deploysync/deploysync/tui/cmdline"
)

func main() {
	if err := cmdline.Run(cmdline.App(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "unkey-tui:", err)
		os.Exit(1)
	}
}
