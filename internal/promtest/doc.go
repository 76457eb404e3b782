// Package promtest runs a real Prometheus server for tests: Debian's
// prometheus 2.42 (scripts/prometheus.sh unpacks it from the same .deb as
// promtool), or the binary DEPLOYSYNC_PROMETHEUS_BIN names. It is no
// stand-in: tests of what queries Prometheus (the metric gates of issue 30)
// meet the real query engine, its staleness and its HTTP API.
//
// A Server scrapes the targets it was given every second and evaluates its
// rules every second, listens on 127.0.0.1 on a free port and keeps its
// TSDB in a directory of its own. Stop kills it (SIGKILL, as an outage
// would) and Start starts it again on the same port and data, so a test
// can take Prometheus away from whatever queries it and give it back.
//
// A test that cannot get the binary fails, naming why; it never skips
// (only -short mode skips it, before looking: no servers there). CI fetches
// the binary up front (`go tool task tools`).
//
// Nothing outlives the test binary: the server runs through
// internal/testproc (its own process group, a parent-death signal, a
// directory under the reaped state root), as internal/kubetest's control
// planes do.
package promtest
