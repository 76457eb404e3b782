package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate/ciliumspec"
)

// MaxJSONDepth bounds how deeply a policy spec nests objects and arrays (the
// spec itself is level 1). MariaDB's JSON_VALID, the CHECK constraint on
// every JSON column, refuses 32 levels or more, so a deeper spec would fail
// in the database instead of as bad input; real Cilium specs nest about 10
// levels.
const MaxJSONDepth = 24

// CiliumPolicySpec checks a CiliumNetworkPolicy's .spec as the API hands it
// over (JSON-shaped: maps, slices, strings, numbers, booleans, nil): nesting
// within MaxJSONDepth, no null at any depth, no NaN or infinity (a protobuf
// Struct holds them, JSON cannot), valid UTF-8; then what Cilium itself
// refuses, by its CRD or by its agent (package ciliumspec: only Cilium's
// fields and types, an endpointSelector and no nodeSelector, at least one
// rule, valid ports, protocols, CIDRs, entities and label selectors, …);
// and at most limits.MaxResourceBytes both as Kubernetes stores it (its
// JSON plus server-side apply's record of its fields) and as the stream
// sends it (a protobuf Struct, bigger than the JSON for numbers: eight
// bytes each, plus framing), which is checked before Cilium's rules. The
// error names the field by its path in the spec.
func CiliumPolicySpec(spec map[string]any) error {
	if len(spec) == 0 {
		return ErrEmpty
	}
	if path, err := jsonValue(spec, 1); err != nil {
		return fmt.Errorf("%s %w", strings.TrimPrefix(path, "."), err)
	}
	stored, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("cannot be stored as JSON: %v", err)
	}
	// The API server writes the policy's object to etcd as JSON, in one
	// request of at most 1.5 MiB, and the object holds more than the spec:
	// server-side apply's record of the fields the agent set repeats every
	// key of every object in it, which about doubles a map-heavy spec (a
	// spec of 909 KB as JSON, 70,000 matchLabels, made an object etcd
	// refused). Within MaxResourceBytes (1 MiB) with that record counted,
	// the object is that plus its metadata (names, labels, the agent's hash
	// annotation and their record: about 1 KiB), half a MiB under the limit.
	record := fieldRecordBytes(spec)
	if n := len(stored) + record; n > limits.MaxResourceBytes {
		return fmt.Errorf("%d bytes as Kubernetes stores it (%d as JSON, plus %d for server-side apply's record of its fields), at most %d allowed",
			n, len(stored), record, limits.MaxResourceBytes)
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
	// Cilium's rules last: their work (compiling the HTTP rules' regular
	// expressions) grows with the spec, which is within the limit now.
	return ciliumspec.Check(spec)
}

// fieldRecordBytes is the size of server-side apply's record of v's fields
// (FieldsV1 in metadata.managedFields) as a real API server writes it: for
// an object with keys, `".":{},` and, per key, `"f:<key>":<record of the
// value>,` where the record of anything but an object with keys is `{}`.
// So a key costs its name as a JSON string plus 6 bytes (its bare name
// plus 8, as measured on 1,000 and 5,000 matchLabels), and an object 7. A
// list is recorded as `{}`, nothing of its items: a CRD's lists are atomic
// unless it declares them a map or a set, which Cilium's CRD does not do
// for its policy rules and a schemaless CRD cannot do.
func fieldRecordBytes(v any) int {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return 0
	}
	n := len(`".":{},`)
	for k, e := range m {
		name, _ := json.Marshal(k) // quoted and escaped as the API server writes it
		n += len("f:") + len(name) + len(":{},") + fieldRecordBytes(e)
	}
	return n
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
	case nil:
		// Cilium's CRD declares no field nullable: the API server refuses
		// a null below the spec's own fields (the top ones' checks say
		// what they must be instead).
		if depth > 2 {
			return "", errors.New("is null, which no field of a CiliumNetworkPolicy may be")
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
