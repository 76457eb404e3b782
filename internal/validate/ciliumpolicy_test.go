package validate

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/internal/limits"
)

// nested is a spec whose endpointSelector holds objects depth levels deep,
// counting the spec itself.
func nested(depth int) map[string]any {
	var v any = map[string]any{}
	for range depth - 2 {
		v = map[string]any{"a": v}
	}
	return map[string]any{"endpointSelector": v}
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
		"a real policy":   allowDNS,
		"deepest allowed": nested(MaxJSONDepth),
		"node selector":   {"nodeSelector": map[string]any{}, "ingressDeny": []any{}, "egressDeny": []any{}, "labels": []any{}, "log": map[string]any{}},
		// A long string's protobuf framing is a few bytes bigger than its
		// JSON's (18 bytes), so this is about as big as a spec can get.
		"nearly the limit": {"description": strings.Repeat("x", limits.MaxResourceBytes-32)},
	} {
		if err := CiliumPolicySpec(spec); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Numbers take 9 bytes in a protobuf Struct and 2 in JSON ("1,"): a
	// list of them fits as stored but not as the stream sends it.
	ones := make([]any, limits.MaxResourceBytes/4)
	for i := range ones {
		ones[i] = 1.0
	}
	for _, c := range []struct {
		name string
		spec map[string]any
		want string // in the message
	}{
		{"empty", map[string]any{}, "empty"},
		{"not a Cilium field", map[string]any{"x": 1}, `"x" is not a field`},
		{"NaN", map[string]any{"endpointSelector": map[string]any{"a": []any{1.0, math.NaN()}}}, "endpointSelector.a[1] is NaN"},
		{"infinity", map[string]any{"description": math.Inf(-1)}, "description is -Inf"},
		{"too deep", nested(MaxJSONDepth + 1), "deeper than 24 levels"},
		{"90 deep", nested(90), "deeper than 24 levels"},
		{"invalid UTF-8", map[string]any{"labels": []any{"\xff"}}, "labels[0] is not valid UTF-8"},
		{"too big as stored", map[string]any{"description": strings.Repeat("x", limits.MaxResourceBytes)}, "1048594 bytes as stored (JSON)"},
		{"too big as sent", map[string]any{"labels": ones}, "as the stream sends it"},
	} {
		err := CiliumPolicySpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// A spec arrives as a protobuf Struct, whose numbers may be NaN or infinite.
// structpb's AsMap turns those into strings that pass every check and are
// stored as if sent; StructMap keeps them numbers, so they are refused.
func TestStructMapKeepsNonFiniteNumbersForTheCheck(t *testing.T) {
	spec := &structpb.Struct{Fields: map[string]*structpb.Value{
		"endpointSelector": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"matchLabels": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"app": structpb.NewStringValue("api")}}),
		}}),
		"ingress": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewNullValue(), structpb.NewBoolValue(true), structpb.NewNumberValue(80),
		}}),
	}}
	if got, want := StructMap(spec), spec.AsMap(); !reflect.DeepEqual(got, want) {
		t.Errorf("StructMap = %v, want AsMap's %v", got, want)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		spec.Fields["ingress"].GetListValue().Values[2] = structpb.NewNumberValue(bad)
		if err := CiliumPolicySpec(spec.AsMap()); err != nil {
			t.Fatalf("AsMap no longer hides %v (%v): StructMap may be unneeded", bad, err)
		}
		if err := CiliumPolicySpec(StructMap(spec)); err == nil || !strings.Contains(err.Error(), "ingress[2] is") {
			t.Errorf("%v: got %v, want ingress[2] refused", bad, err)
		}
	}
}
