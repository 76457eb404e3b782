// Package servertest runs a real ctrld for tests: a fresh migrated database
// on the test MariaDB, the full gRPC server on a loopback port, and helpers
// for agent and operator clients with their own tokens.
package servertest
