// Package operatorkeys owns the operators' registered SSH public keys (the
// operator_keys table): adding one from an authorized_keys line, listing
// and removing them, and looking a key up by its fingerprint for ctrld's
// SSH console (tui/sshserve asks through the interface cmd/ctrld wires to
// a Registry).
//
// A key maps to one operator name and one role (read-only or operator).
// There is no cache: a lookup is one indexed read, and a removed key must
// stop working on every replica at its next re-check, which a cache would
// delay.
package operatorkeys
