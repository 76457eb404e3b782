// Package metrics defines ctrld's Prometheus metrics in one place, so their
// names and labels are listed once and every component reports into the same
// set.
package metrics
