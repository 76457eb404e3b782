package validate

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/internal/limits"
)

// nested is a spec whose ingress rule holds objects depth levels deep,
// counting the spec itself (level 1) and the ingress list (level 2).
func nested(depth int) map[string]any {
	var v any = map[string]any{}
	for range depth - 3 {
		v = map[string]any{"a": v}
	}
	return map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{v}}
}

// matchLabels is a spec selecting endpoints by n labels, "k00000": "v" on
// (13 bytes each as JSON, 27 as Kubernetes stores them), denying them all
// ingress.
func matchLabels(n int) map[string]any {
	labels := make(map[string]any, n)
	for i := range n {
		labels[fmt.Sprintf("k%05d", i)] = "v"
	}
	return map[string]any{"endpointSelector": map[string]any{"matchLabels": labels}, "ingress": []any{map[string]any{}}}
}

// denyAll is a spec that puts every endpoint of its namespace into default
// deny both ways, with extra fields.
func denyAll(extra map[string]any) map[string]any {
	spec := map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}, "egress": []any{map[string]any{}}}
	maps.Copy(spec, extra)
	return spec
}

// icmpRules is an ingress rule list allowing ICMP echo n times over, 40
// fields to a rule (Cilium's most). A type is a number: 9 bytes in a
// protobuf Struct, 1 in JSON.
func icmpRules(n int) []any {
	var rules []any
	for n > 0 {
		fields := make([]any, min(n, 40))
		for i := range fields {
			fields[i] = map[string]any{"type": 8.0}
		}
		rules = append(rules, map[string]any{"icmps": []any{map[string]any{"fields": fields}}})
		n -= len(fields)
	}
	return rules
}

func TestCiliumPolicySpec(t *testing.T) {
	allowDNS := map[string]any{
		"description":      "allow DNS",
		"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}},
		"egress": []any{map[string]any{"toPorts": []any{map[string]any{
			"ports": []any{map[string]any{"port": "53", "protocol": "UDP"}},
		}}}},
		"enableDefaultDeny": map[string]any{"egress": false},
	}
	for name, spec := range map[string]map[string]any{
		"a real policy": allowDNS,
		// A long string costs a few bytes more as the stream sends it (its
		// protobuf framing) than as Kubernetes stores it: 69 bytes of JSON
		// around it, and 79 of record (four keys and the spec's object).
		"nearly the limit": denyAll(map[string]any{"description": strings.Repeat("x", limits.MaxResourceBytes-192)}),
		// 27 bytes a label: 38,000 of them nearly fill the limit.
		"map-heavy within the limit": matchLabels(38_000),
	} {
		if err := CiliumPolicySpec(spec); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// An ICMP type is a number, 9 bytes in a protobuf Struct and 1 in
	// JSON: a rule list with enough of them fits as stored but not as sent.
	icmps := icmpRules(limits.MaxResourceBytes / 20)
	anySelector := map[string]any{}
	for _, c := range []struct {
		name string
		spec map[string]any
		want string // in the message
	}{
		{"empty", map[string]any{}, "empty"},
		{"not a Cilium field", map[string]any{"x": 1}, `"x" is not a field`},
		{"NaN", map[string]any{"endpointSelector": anySelector, "ingress": []any{map[string]any{"a": []any{1.0, math.NaN()}}}}, "ingress[0].a[1] is NaN"},
		{"infinity", map[string]any{"endpointSelector": anySelector, "description": math.Inf(-1)}, "description is -Inf"},
		{"too deep", nested(MaxJSONDepth + 1), "deeper than 24 levels"},
		{"90 deep", nested(90), "deeper than 24 levels"},
		{"invalid UTF-8", map[string]any{"endpointSelector": anySelector, "description": "\xff"}, "description is not valid UTF-8"},

		// Types Cilium's CRD refuses, so the agent's apply would fail.
		{"ingress a string", map[string]any{"ingress": "notalist"}, "ingress: must be a list of ingress rules, got a string"},
		{"selector a number", map[string]any{"endpointSelector": 5.0}, "endpointSelector: must be an endpoint selector (an object), got a number"},
		{"selector null", map[string]any{"endpointSelector": nil}, "endpointSelector: must be an endpoint selector (an object), got null"},
		{"no selector", map[string]any{"description": "x"}, "needs endpointSelector: Cilium requires one"},
		{"both selectors", map[string]any{"endpointSelector": anySelector, "nodeSelector": anySelector}, "nodeSelector: a namespaced CiliumNetworkPolicy cannot select nodes"},
		// Accepted once, as a valid spec; Cilium refuses a node selector in
		// a namespaced policy ("rule cannot have NodeSelector"), and a spec
		// without any rule (empty lists are none).
		{"node selector", map[string]any{"nodeSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "zone", "operator": "Exists"}}},
			"ingressDeny": []any{}, "egressDeny": []any{}, "labels": []any{map[string]any{"key": "team"}}, "log": map[string]any{}},
			`nodeSelector: a namespaced CiliumNetworkPolicy cannot select nodes (Cilium refuses it: "rule cannot have NodeSelector"`},
		{"no rule", map[string]any{"endpointSelector": anySelector, "ingressDeny": []any{}, "egressDeny": []any{}}, "has no rule: Cilium requires at least one"},
		{"a rule not an object", map[string]any{"endpointSelector": anySelector, "egress": []any{map[string]any{}, "x"}}, "egress[1]: must be an egress rule (an object), got a string"},
		// Within MaxJSONDepth, but no field of Cilium's nests this deep.
		{"deepest allowed", nested(MaxJSONDepth), `ingress[0]: "a" is not a field of an ingress rule`},
		{"a null in a rule", map[string]any{"endpointSelector": anySelector, "ingress": []any{map[string]any{"fromEndpoints": nil}}}, "ingress[0].fromEndpoints is null"},
		{"a null in a list", map[string]any{"endpointSelector": anySelector, "egress": []any{map[string]any{"toPorts": []any{nil}}}}, "egress[0].toPorts[0] is null"},
		{"deny rules null", map[string]any{"endpointSelector": anySelector, "ingressDeny": nil}, "ingressDeny: must be a list of ingress deny rules, got null"},
		{"deny rules an object", map[string]any{"endpointSelector": anySelector, "egressDeny": map[string]any{}}, "egressDeny: must be a list of egress deny rules, got an object"},
		{"labels a string", map[string]any{"endpointSelector": anySelector, "labels": "team=a"}, "labels: must be a list of labels, got a string"},
		{"description an object", map[string]any{"endpointSelector": anySelector, "description": map[string]any{}}, "description: must be a string, got an object"},
		{"default deny a boolean", map[string]any{"endpointSelector": anySelector, "enableDefaultDeny": true}, "enableDefaultDeny: must be a default-deny setting (an object), got a boolean"},
		{"log a list", map[string]any{"endpointSelector": anySelector, "log": []any{}}, "log: must be a log setting (an object), got a list"},
		{"labels at the selector's top", map[string]any{"endpointSelector": map[string]any{"app": "api"}}, `endpointSelector: "app" is not a field of an endpoint selector`},
		{"matchLabels a list", map[string]any{"endpointSelector": map[string]any{"matchLabels": []any{}}}, "endpointSelector.matchLabels: must be an object of strings, got a list"},
		{"a label value a number", map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"port": 80.0}}}, "endpointSelector.matchLabels.port: must be a string, got a number"},
		{"an expression a string", map[string]any{"endpointSelector": map[string]any{"matchExpressions": []any{"app in (api)"}}}, "endpointSelector.matchExpressions[0]: must be a requirement (an object), got a string"},

		// Sizes.
		{"too big as JSON", denyAll(map[string]any{"description": strings.Repeat("x", limits.MaxResourceBytes)}), "1048724 bytes as Kubernetes stores it (1048645 as JSON, plus 79 for"},
		{"too big as sent", map[string]any{"endpointSelector": anySelector, "ingress": icmps}, "as the stream sends it"},
		// 909 KB as JSON, accepted once: server-side apply's record of
		// its keys made the object bigger than etcd takes, and the agent's
		// apply failed for as long as it was there.
		{"map-heavy", matchLabels(69_901), "as Kubernetes stores it (908766 as JSON, plus 978693 for server-side apply's record"},
	} {
		err := CiliumPolicySpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// A spec arrives as a protobuf Struct, whose numbers may be NaN or infinite.
// structpb's AsMap turns those into strings, which pass the check where a
// string may be (a label's value) and are stored as if sent; StructMap
// keeps them numbers, so they are refused.
func TestStructMapKeepsNonFiniteNumbersForTheCheck(t *testing.T) {
	object := func(fields map[string]*structpb.Value) *structpb.Value {
		return structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	list := func(values ...*structpb.Value) *structpb.Value {
		return structpb.NewListValue(&structpb.ListValue{Values: values})
	}
	icmp := map[string]*structpb.Value{"type": structpb.NewNumberValue(8), "family": structpb.NewNullValue()}
	label := map[string]*structpb.Value{"key": structpb.NewStringValue("team"), "value": structpb.NewStringValue("payments")}
	spec := &structpb.Struct{Fields: map[string]*structpb.Value{
		"endpointSelector":  object(map[string]*structpb.Value{"matchLabels": object(map[string]*structpb.Value{"app": structpb.NewStringValue("api")})}),
		"enableDefaultDeny": object(map[string]*structpb.Value{"ingress": structpb.NewBoolValue(true)}),
		"ingress":           list(object(map[string]*structpb.Value{"icmps": list(object(map[string]*structpb.Value{"fields": list(object(icmp))}))})),
		"labels":            list(object(label)),
	}}
	if got, want := StructMap(spec), spec.AsMap(); !reflect.DeepEqual(got, want) {
		t.Errorf("StructMap = %v, want AsMap's %v", got, want)
	}
	delete(icmp, "family") // a null is refused itself
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		label["value"] = structpb.NewNumberValue(bad)
		if err := CiliumPolicySpec(spec.AsMap()); err != nil {
			t.Fatalf("AsMap no longer hides %v (%v): StructMap may be unneeded", bad, err)
		}
		if err := CiliumPolicySpec(StructMap(spec)); err == nil || !strings.Contains(err.Error(), "labels[0].value is") {
			t.Errorf("%v: got %v, want labels[0].value refused", bad, err)
		}
	}
}
