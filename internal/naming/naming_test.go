package naming

import (
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/validate"
)

func TestNamespace(t *testing.T) {
	if got := Namespace("acme", "prod"); got != "acme-prod" {
		t.Errorf("short names join: got %q", got)
	}
	long1 := Namespace(strings.Repeat("a", 48), strings.Repeat("b", 48))
	long2 := Namespace(strings.Repeat("a", 48), strings.Repeat("b", 47)+"c")
	for _, ns := range []string{long1, long2, Namespace(strings.Repeat("a", 52)+"-", "x-"+strings.Repeat("y", 40))} {
		if len(ns) > 63 || validate.Region(ns) != nil {
			t.Errorf("%q is not a valid namespace name", ns)
		}
	}
	if long1 == long2 {
		t.Error("different long IDs must give different namespaces")
	}
}
