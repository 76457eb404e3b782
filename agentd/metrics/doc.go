// Package metrics defines agentd's Prometheus metrics in one place.
package metrics
