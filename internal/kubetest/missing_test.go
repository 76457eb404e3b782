package kubetest

import (
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/testrec"
)

// Missing binaries fail a test in CI, naming the command that builds them,
// and only skip outside CI.
func TestMissingBinariesFailInCI(t *testing.T) {
	if testing.Short() {
		t.Skip("kubetest: -short mode skips before looking for binaries")
	}
	t.Setenv(EnvBinDir, t.TempDir()) // holds no kube-apiserver
	for _, ci := range []string{"true", "false"} {
		t.Setenv("CI", ci)
		r := testrec.Run(t, func(tb testing.TB) { StartForTest(tb, Options{}) })
		msg := r.Failed + r.Skipped
		if !strings.Contains(msg, "go tool task kube:build") {
			t.Errorf("CI=%s: message %q does not say how to build them", ci, msg)
		}
		if (ci == "true") != (r.Failed != "") || (ci == "false") != (r.Skipped != "") {
			t.Errorf("CI=%s: failed=%q skipped=%q", ci, r.Failed, r.Skipped)
		}
	}
}
