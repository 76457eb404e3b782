// Command devstack brings up deploysync's whole stack on this machine for
// `go tool task dev`: MariaDB, ctrld, two regions each with its own
// Kubernetes cluster and agent, a demo deployment, and the console in the
// foreground.
//
// Each region's cluster is a kind cluster (scripts/kind/cluster.yaml) where
// a Docker engine answers, else a locally built control plane (apiserver,
// controller manager, scheduler) with kwok, so Pods reach Running without
// Docker; --mode picks one explicitly. Quitting the console (q) or Ctrl+C
// stops everything it started and deletes the kind clusters; `devstack down`
// cleans up after a crash.
package main
