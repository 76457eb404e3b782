// Package checks runs a region's rollout checks against the region's own
// Prometheus. It asks ctrld what to evaluate (SyncChecks, on the
// connection the agent opened: ctrld never reaches into a region),
// evaluates each query at its interval, a bounded number at once and
// each within a timeout and a size bound, and sends the results with its
// next call. It runs on a loop of its own, so a slow or dead Prometheus
// delays no apply, status report or heartbeat.
package checks
