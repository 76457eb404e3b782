// Package dial connects the command-line clients (agentd, unkey-tui) to
// ctrld: TLS (optionally mutual) or, for loopback development, plaintext,
// with the bearer token on every call.
//
// Plaintext is refused to an address that is not loopback (see Loopback)
// unless the caller says so explicitly (InsecureNonLoopback): a token sent
// in the clear across a network is a token given away. ctrld's listener
// follows the same rule with the same Loopback. Every connection accepts
// messages up to limits.MaxMessageBytes, the size ctrld sends at most, so a
// resource ctrld accepted can never be one its clients refuse to receive.
package dial
