// Package systemd holds the daemons' systemd units. Its test checks them
// with systemd's own verifier and against the binaries they start, so a
// misspelt key or environment variable fails here instead of on a host.
package systemd
