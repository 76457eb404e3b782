package ciliumspec

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The hand-written label rules agree with Kubernetes' own, which the API
// server and Cilium's selector validation use: this package does not link
// apimachinery, so the test holds it to it.
func TestLabelRulesAreKubernetes(t *testing.T) {
	n63, n64 := strings.Repeat("a", 63), strings.Repeat("a", 64)
	sub253 := strings.Repeat(strings.Repeat("b", 62)+".", 3) + strings.Repeat("b", 64) // 253 characters
	keys := []string{
		"", "a", "A", "app", "App_1.x-y", "-app", "app-", "_app", "app_", ".app", "a..b", "a b", "a/b", "a//b", "/a", "a/",
		"example.com/app", "Example.com/app", "ex_ample.com/app", "-ex.com/app", "ex-.com/app", "ex..com/app", "ex.com/a/b",
		"app.kubernetes.io/name", "k8s.io/app", "1.2.3.4/x", n63, n64, "x.com/" + n63, "x.com/" + n64, sub253 + "/a", sub253 + "b/a",
		"any.app", "k8s.io.kubernetes.pod.namespace", "any." + n63[:59], "any." + n63[:60], "ünï/côde", "app\n", "a:b", "a=b",
	}
	for _, k := range keys {
		want := len(validation.IsQualifiedName(k)) == 0
		if got := qualifiedName(k) == nil; got != want {
			t.Errorf("qualifiedName(%q) valid = %v, Kubernetes says %v (%v)", k, got, want, validation.IsQualifiedName(k))
		}
	}
	values := append(keys, "", n63, n64, "1", "a.b", "a-b_c", "-", ".", "a.", "ü")
	for _, v := range values {
		want := len(validation.IsValidLabelValue(v)) == 0
		if got := labelValue(v) == nil; got != want {
			t.Errorf("labelValue(%q) valid = %v, Kubernetes says %v (%v)", v, got, want, validation.IsValidLabelValue(v))
		}
	}
	for _, s := range []string{"a", "a.b", "a-b.c", "A", "a_b", "a..b", ".a", "a.", "-a", "a-", sub253, sub253 + "b", "0.1", "xn--bcher-kva.example"} {
		want := len(validation.IsDNS1123Subdomain(s)) == 0
		if got := Subdomain(s) == nil && s != ""; got != want {
			t.Errorf("Subdomain(%q) valid = %v, Kubernetes says %v (%v)", s, got, want, validation.IsDNS1123Subdomain(s))
		}
	}
}

// Cilium checks a selector's key after prefixing its source
// (labels.GetExtendedKeyFrom), so these are its keys.
func TestExtendedKeyIsCilium(t *testing.T) {
	for key, want := range map[string]string{
		"app":                             "any.app",
		"app.kubernetes.io/name":          "any.app.kubernetes.io/name",
		"k8s:io.kubernetes.pod.namespace": "k8s.io.kubernetes.pod.namespace",
		"k8s:app":                         "k8s.app",
		"any:app":                         "any.app",
		"$host":                           "reserved.host",
		"reserved:world":                  "reserved.world",
		"reserved.health":                 "reserved.health",
		"app=api":                         "any.app",
		"":                                "any.",
	} {
		if got := extendedKey(key); got != want {
			t.Errorf("extendedKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// A refusal names where it is, however deep, with a user's odd map keys
// quoted and clipped.
func TestErrorsNameTheField(t *testing.T) {
	odd := "weird key/" + strings.Repeat("x", 100)
	spec := map[string]any{
		"endpointSelector": map[string]any{},
		"egress": []any{map[string]any{"toGroups": []any{map[string]any{"aws": map[string]any{
			"labels": map[string]any{"ok": "x", odd: 1.0},
		}}}}},
	}
	want := `egress[0].toGroups[0].aws.labels["weird key/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"… (110 bytes)]: must be a string, got a number`
	if err := Check(spec); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
