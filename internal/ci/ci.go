// Package ci tells tests whether they run in CI, where a missing dependency
// (MariaDB, the Kubernetes binaries, systemd-analyze) fails the test
// instead of skipping it.
package ci

import (
	"os"
	"strconv"
)

// Running reports whether CI is set to a true value (CI=true, CI=1).
func Running() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}
