package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: seconds DURATION (e.g. 30m)")
		os.Exit(2)
	}
	d, err := time.ParseDuration(os.Args[1])
	if err != nil || d < 3*time.Second {
		fmt.Fprintf(os.Stderr, "chaos: --duration %q: want a Go duration of at least 3s, like 30m or 1h\n", os.Args[1])
		os.Exit(2)
	}
	fmt.Println(int(d.Seconds()))
}
