package validate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestSpecHashIsALabelValue holds SpecHash to Kubernetes' own rule for
// label values, which the agent's label must pass.
func TestSpecHashIsALabelValue(t *testing.T) {
	for _, h := range []string{"", "a", "0123456789abcdef", "v1.2_3-x", strings.Repeat("a", 63),
		strings.Repeat("a", 64), "-a", "a-", "a b", "a/b", "ä", "a\n", ".a", "a_"} {
		ours := SpecHash(h) == nil
		theirs := h == "" || len(validation.IsValidLabelValue(h)) == 0
		if ours != theirs {
			t.Errorf("SpecHash(%q) accepts: %v; Kubernetes: %v", h, ours, theirs)
		}
	}
}

func TestInstanceReason(t *testing.T) {
	for _, r := range []string{"", "CrashLoopBackOff", "OOMKilled", "Unschedulable", strings.Repeat("x", 64)} {
		if err := InstanceReason(r); err != nil {
			t.Errorf("InstanceReason(%q): %v", r, err)
		}
	}
	for _, r := range []string{strings.Repeat("x", 65), "a\x1b[31m", "\xff", "a\u200bb"} {
		if err := InstanceReason(r); err == nil {
			t.Errorf("InstanceReason(%q) accepted", r)
		}
	}
}
