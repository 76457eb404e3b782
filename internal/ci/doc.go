// Package ci tells tests whether they run in CI, where a missing dependency
// (MariaDB, the Kubernetes binaries, systemd-analyze) fails the test
// instead of skipping it.
package ci
