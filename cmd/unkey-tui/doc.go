// Command unkey-tui is the operator console for deploysync. See
// `unkey-tui --help`; the command line is package tui/cmdline.
package main
