package validate

import (
	"strings"
	"testing"
)

func TestPodName(t *testing.T) {
	for _, s := range []string{"a", "api-0", "api-7d9f8-x2x4z", "0", "a.b-c.d", strings.Repeat("a", 253)} {
		if err := PodName(s); err != nil {
			t.Errorf("PodName(%q) = %v, want ok", s, err)
		}
	}
	for _, s := range []string{"", "p\x00\x1b[2J", "Api-0", "-a", "a-", "a..b", ".a", "a.", "a_b", "a b", "a.-b",
		"pod\u202e", strings.Repeat("a", 254)} {
		if PodName(s) == nil {
			t.Errorf("PodName(%q) accepted, want error", s)
		}
	}
}
