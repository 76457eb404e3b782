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

// Names already in clusters must stay what they are: a changed result would
// move every object of the pair to another namespace.
func TestNamespaceIsStable(t *testing.T) {
	for _, c := range []struct{ ws, env, want string }{
		{"acme", "prod", "acme-prod"},
		{"acme-prod", "x", "acme-prod-x"},
		{"acme", "prod-x", "acme-prod-x"}, // the collision daemon/desired refuses
		{strings.Repeat("a", 48), strings.Repeat("b", 48), strings.Repeat("a", 48) + "-bbb-0251810010"},
	} {
		if got := Namespace(c.ws, c.env); got != c.want {
			t.Errorf("Namespace(%q, %q) = %q, want %q", c.ws, c.env, got, c.want)
		}
	}
}
