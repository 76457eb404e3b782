// Package sshserve is the console's SSH front door, run inside ctrld: the
// SSH listener and its host key, public-key authentication against the
// operators' registered keys (nothing else: no password, no
// keyboard-interactive), a rate limit on authentication attempts per
// source address, bounds on connections not yet in a session (in all and
// per source address, with a deadline) and on concurrent key lookups,
// bounds on session channels per connection, per key and in all (counted
// from the moment a channel opens, each with a deadline to start a
// session), on what a session keeps before its shell (a few variables the
// console reads) and on its input rate, idle and maximum session times,
// and the console (package tui) run per session with the session's window
// size, resizes, TERM and NO_COLOR.
//
// It speaks what current OpenSSH offers by default, without SHA-1
// (algorithms.go), and refuses DSA keys and RSA keys under 2048 bits at
// login, whatever the registry holds. The host key file must be private
// to its owner, as token files must.
//
// It holds no credential of its own. Who a key belongs to comes from Keys,
// and each session's operator client from Console, which cmd/ctrld wires to
// ctrld's key registry and to a credential minted for that session alone
// (see docs/design.md, "The console over SSH"). daemon/ does not import
// this package; this package imports nothing of daemon/.
//
// The person is looked up again from the session's own key when the
// session starts, not taken from the authentication callback: x/crypto/ssh
// may call that callback for keys the client offers but never proves
// (CVE-2024-45337), so only the key the connection ended up authenticated
// with counts. Live sessions' keys are checked again every
// Config.Recheck, so a removed key's sessions end within it on every
// replica.
package sshserve
