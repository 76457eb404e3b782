// Package monitoring holds what Prometheus and Grafana need to watch
// deploysync, and the tests that keep it honest:
//
//   - deploysync-alerts.yaml: alert rules (region lagging, agent down,
//     region paused, applies failing, full sync failing, deploy workflow
//     failed, panics, streams stalled, watermark stuck), each explained in
//     docs/runbook.md;
//   - deploysync-alerts.test.yaml: promtool unit tests of those rules;
//   - deploysync-dashboard.json: a Grafana dashboard.
//
// The tests build promtool from the Go module proxy (outside this module,
// cached per version), check and unit-test the rules with it, and check
// that every metric the rules and the dashboard read is one ctrld or
// agentd registers, so a renamed metric cannot leave an alert that never
// fires.
package monitoring
