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
