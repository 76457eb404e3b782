// Package textclean makes untrusted text safe to show in a terminal: what
// an agent sends people (a container's log, a termination message, an
// event's message) is whatever the workload or the cluster wrote, and may
// carry escape sequences that retitle the terminal, clear the screen, move
// the cursor over what the console drew or fake colours.
//
// Clean removes every ANSI escape sequence (CSI, OSC, DCS, SOS, PM, APC,
// and the two-byte ones), whether introduced by ESC or by the C1 code
// points, every other C0 and C1 control character but line feed and tab,
// and every Unicode format character (category Cf: bidirectional controls,
// zero-width characters); it turns invalid UTF-8 into U+FFFD. What it
// returns is valid UTF-8, never longer than a limit given. It keeps line
// structure (a log stays lines); the console's tui.Clean, for one-line
// display, goes further.
//
// It depends on nothing but the standard library, so that agentd, which
// may not link tui/, and ctrld share it.
package textclean
