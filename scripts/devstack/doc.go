// Command devstack brings up deploysync's whole stack on this machine for
// `go tool task dev`: MariaDB, ctrld, two regions each with its own
// Kubernetes cluster and agent, a demo deployment, and the console in the
// foreground, on devstack's own stdin, stdout and stderr.
//
// Each region's cluster is a kind cluster (scripts/kind/cluster.yaml) where
// a Docker engine answers, else a locally built control plane (apiserver,
// controller manager, scheduler) with kwok, so Pods reach Running without
// Docker; --mode picks one explicitly. Each region also gets a traffic
// simulator against its cluster (cmd/trafficsim, the daemon
// trafficsim-REGION: kwok's Pods run no code, so their requests are
// SIMULATED) and a Prometheus of its own scraping it (internal/promtest's,
// Debian's server, data under the state directory), whose URL the summary
// prints: the region's Prometheus the metric gates query (issue 30).
// Quitting the console (q) or Ctrl+C stops everything it started and
// deletes the kind clusters.
//
// Everything the stack creates lives in the state directory (.dev): a pid
// file per component (pids/NAME.json: name, pid, argv, added environment,
// log), so that `devstack restart NAME` can start one again and `devstack
// down` can stop what a crash left; the database name and the kind
// clusters it made; the control planes' data (TMPDIR points there). A pid
// is only ever signalled while it still runs the recorded command line.
// When devstack dies, however it dies, its daemons get SIGKILL and the
// console SIGTERM (on which it restores the terminal). A daemon that dies
// while the console has the screen is logged to devstack.log, shown on the
// console's status line (a file per dead component in notices/, which the
// console is told of with --notices and `devstack restart` removes) and
// listed once the console exits.
//
// ctrld also serves the console over SSH (--ssh, 127.0.0.1:2222) with a
// host key it generates in ssh/; devstack makes two key pairs there,
// registers them for the operator (ssh/operator may act, ssh/read-only
// may not), writes ssh/known_hosts for the host key and prints the ssh
// commands that open the console with each.
package main
