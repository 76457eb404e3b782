// Package cmdline is unkey-tui's command line: the flags that say how to
// reach ctrld, the console (package tui) when no command is given, and the
// one-shot commands for scripts, each one call on the operator API (and a
// read to name the regions it reached), printed as a table or, with
// --output json, as one JSON document (docs/cli-json.md).
//
// Text from ctrld may be agent-written, so it never reaches the terminal
// as it is: tables pass it through tui.Clean, and JSON escapes every
// character Clean drops (tui.Unsafe) while keeping the text itself.
//
// cmd/unkey-tui only calls Run(App(), os.Args); the tests here drive App
// against a real ctrld (servertest) exactly as main does.
package cmdline
