// Command ctrld is deploysync's control plane: the command line around
// daemon/server. It owns the flags and subcommands only:
//   - serve runs the server (the agents' stream, the operator API, the
//     rollout driver, retention and, with --ssh-listen, the SSH console);
//   - migrate brings the database's schema up to date;
//   - token and operator issue, list and revoke agent and operator tokens
//     and the SSH console's keys.
//
// What each does is in `ctrld --help` and docs/design.md.
package main
