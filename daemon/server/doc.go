// Package server assembles ctrld: the gRPC server (cluster, operator and
// peer services, health, reflection, TLS, auth), the tailer, the replica's
// registration and pokes of its peers, retention, the deploy workflow, and
// the metrics/health HTTP endpoint; and shuts them down in an order that
// ends agents' streams cleanly.
package server
