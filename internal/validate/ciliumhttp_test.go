package validate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate/ciliumspec"
)

// httpRules is a spec allowing HTTP to port 8080 by n rules, the path of
// rule i being path(i).
func httpRules(n int, path func(i int) string) map[string]any {
	rules := make([]any, n)
	for i := range rules {
		rules[i] = map[string]any{"method": "GET", "path": path(i)}
	}
	return map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{
		"toPorts": []any{map[string]any{"ports": []any{tcp("8080")}, "rules": map[string]any{"http": rules}}},
	}}}
}

// A spec over the size limit is refused for its size before any of its
// rules is looked at: compiling the regular expressions of megabytes of
// HTTP rules costs seconds.
func TestCiliumPolicySpecSizeComesFirst(t *testing.T) {
	spec := httpRules(2_000, func(i int) string { return fmt.Sprintf("/%d/%s", i, strings.Repeat(`\pL|`, 150)) })
	spec["notCilium"] = true
	if err := CiliumPolicySpec(spec); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d allowed", limits.MaxResourceBytes)) {
		t.Fatalf("got %v, want the size refused", err)
	}
}

// The regular expressions of a policy's HTTP rules are bounded in number
// and in distinct text, each compiled once however often it is repeated.
func TestCiliumPolicySpecBoundsHTTPRegexps(t *testing.T) {
	distinct := func(i int) string { return fmt.Sprintf("/v1/items/%d/.*", i) }
	if err := CiliumPolicySpec(httpRules(ciliumspec.MaxHTTPRules, distinct)); err != nil {
		t.Errorf("%d HTTP rules: %v", ciliumspec.MaxHTTPRules, err)
	}
	want := fmt.Sprintf("has %d HTTP rules, at most %d allowed in a policy", ciliumspec.MaxHTTPRules+1, ciliumspec.MaxHTTPRules)
	if err := CiliumPolicySpec(httpRules(ciliumspec.MaxHTTPRules+1, distinct)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%d HTTP rules: got %v, want %q", ciliumspec.MaxHTTPRules+1, err, want)
	}

	// 40 paths of 1 KiB: too much text to compile when they differ, one
	// path to compile when they are the same.
	long := func(i int) string { return fmt.Sprintf("/%03d%s", i, strings.Repeat("a", 1<<10)) }
	want = fmt.Sprintf("at most %d allowed in a policy", ciliumspec.MaxHTTPRegexpBytes)
	if err := CiliumPolicySpec(httpRules(40, long)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("40 distinct paths of 1 KiB: got %v, want %q", err, want)
	}
	if err := CiliumPolicySpec(httpRules(40, func(int) string { return long(0) })); err != nil {
		t.Errorf("one path of 1 KiB 40 times: %v", err)
	}
}

// A regular expression that does not compile is refused by its field, the
// message quoting it clipped, however long it is.
func TestCiliumPolicySpecClipsABadRegexp(t *testing.T) {
	bad := strings.Repeat("a", 30_000) + "("
	err := CiliumPolicySpec(httpRules(1, func(int) string { return bad }))
	const want = `ingress[0].toPorts[0].rules.http[0].path: "aaaa`
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "missing closing )") || len(err.Error()) > 300 {
		t.Fatalf("got %d bytes: %.400v; want at most 300, starting %q and saying `missing closing )`", len(fmt.Sprint(err)), err, want)
	}
}

// The cost of checking the heaviest policies allowed: as many HTTP rules
// as allowed, all with the same heavy regular expression, or as many
// different heavy ones as fit MaxHTTPRegexpBytes (Unicode classes in an
// alternation are the slowest to compile per byte).
func BenchmarkCiliumPolicySpecHTTPRules(b *testing.B) {
	heavy := func(i int) string { return fmt.Sprintf("/%04d/%s", i, strings.Repeat(`\pL|`, 30)) }
	for name, spec := range map[string]map[string]any{
		"repeated": httpRules(ciliumspec.MaxHTTPRules, func(int) string { return heavy(0) }),
		"distinct": httpRules((ciliumspec.MaxHTTPRegexpBytes-len("GET"))/len(heavy(0)), heavy),
	} {
		if err := CiliumPolicySpec(spec); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = CiliumPolicySpec(spec)
			}
		})
	}
}
