// Command seconds prints a Go duration ("30m", "1h30m") in whole seconds,
// for scripts/chaos.sh.
package main
