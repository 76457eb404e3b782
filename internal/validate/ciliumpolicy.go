package validate

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/internal/limits"
)

// MaxJSONDepth bounds how deeply a policy spec nests objects and arrays (the
// spec itself is level 1). MariaDB's JSON_VALID, the CHECK constraint on
// every JSON column, refuses 32 levels or more, so a deeper spec would fail
// in the database instead of as bad input; real Cilium specs nest about 10
// levels.
const MaxJSONDepth = 24

// ciliumSpecFields are the top-level fields of a CiliumNetworkPolicy's spec
// (cilium.io/v2; the Rule type of Cilium's pkg/policy/api). Cilium's CRD
// prunes or refuses any other, so a spec with another field would not be
// applied as it was accepted.
var ciliumSpecFields = []string{
	"endpointSelector", "nodeSelector",
	"ingress", "ingressDeny", "egress", "egressDeny",
	"labels", "description", "enableDefaultDeny", "log",
}

// CiliumPolicySpec checks a CiliumNetworkPolicy's .spec as the API hands it
// over (JSON-shaped: maps, slices, strings, numbers, booleans, nil): only
// Cilium's top-level fields, nesting within MaxJSONDepth, no NaN or
// infinity (a protobuf Struct holds them, JSON cannot), valid UTF-8, and at
// most limits.MaxResourceBytes both as stored (JSON) and as the stream
// sends it (a protobuf Struct, which is the bigger of the two for numbers:
// eight bytes each, plus framing).
func CiliumPolicySpec(spec map[string]any) error {
	if len(spec) == 0 {
		return ErrEmpty
	}
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		if !slices.Contains(ciliumSpecFields, k) {
			return fmt.Errorf("%.64q is not a field of a CiliumNetworkPolicy spec (%s)", k, strings.Join(ciliumSpecFields, ", "))
		}
	}
	if path, err := jsonValue(spec, 1); err != nil {
		return fmt.Errorf("%s %w", strings.TrimPrefix(path, "."), err)
	}
	stored, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("cannot be stored as JSON: %v", err)
	}
	if len(stored) > limits.MaxResourceBytes {
		return fmt.Errorf("%d bytes as stored (JSON), at most %d allowed", len(stored), limits.MaxResourceBytes)
	}
	// The stream builds its Struct from what the database returns.
	var read map[string]any
	if err := json.Unmarshal(stored, &read); err != nil {
		return fmt.Errorf("cannot be read back from JSON: %v", err)
	}
	event, err := structpb.NewStruct(read)
	if err != nil {
		return fmt.Errorf("cannot be sent as a protobuf Struct: %v", err)
	}
	if n := proto.Size(event); n > limits.MaxResourceBytes {
		return fmt.Errorf("%d bytes as the stream sends it (%d as stored), at most %d allowed", n, len(stored), limits.MaxResourceBytes)
	}
	return nil
}

// StructMap is s as a JSON-shaped map, for CiliumPolicySpec. It differs
// from structpb's AsMap in one way: a NaN or infinite number stays a number,
// which CiliumPolicySpec refuses, where AsMap turns it into the string "NaN"
// or "Infinity" that would be stored as if the client had sent it.
func StructMap(s *structpb.Struct) map[string]any {
	m := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		m[k] = structValue(v)
	}
	return m
}

func structValue(v *structpb.Value) any {
	switch v := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return v.NumberValue
	case *structpb.Value_StructValue:
		return StructMap(v.StructValue)
	case *structpb.Value_ListValue:
		list := make([]any, len(v.ListValue.GetValues()))
		for i, e := range v.ListValue.GetValues() {
			list[i] = structValue(e)
		}
		return list
	}
	return v.AsInterface() // null, string, bool
}

// jsonValue checks v, which sits at nesting level depth, and everything in
// it. On a problem it returns where it is (".a[2].b") and what it is; the
// path is built only then, on the way back up, so a valid spec costs no
// string building.
func jsonValue(v any, depth int) (path string, err error) {
	switch v := v.(type) {
	case map[string]any:
		if depth > MaxJSONDepth {
			return "", fmt.Errorf("nests deeper than %d levels", MaxJSONDepth)
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if !utf8.ValidString(k) {
				return "", fmt.Errorf("has a key that is not valid UTF-8")
			}
			if p, err := jsonValue(v[k], depth+1); err != nil {
				return "." + Clip(k, 64) + p, err
			}
		}
	case []any:
		if depth > MaxJSONDepth {
			return "", fmt.Errorf("nests deeper than %d levels", MaxJSONDepth)
		}
		for i, e := range v {
			if p, err := jsonValue(e, depth+1); err != nil {
				return fmt.Sprintf("[%d]%s", i, p), err
			}
		}
	case float64:
		return "", finite(v)
	case float32:
		return "", finite(float64(v))
	case string:
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("is not valid UTF-8")
		}
	}
	return "", nil
}

func finite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("is %v, which JSON cannot hold", f)
	}
	return nil
}
