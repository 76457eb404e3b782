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
