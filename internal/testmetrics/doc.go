// Package testmetrics reads what a Prometheus registry holds, for tests
// that assert on ctrld's and agentd's metrics.
package testmetrics
