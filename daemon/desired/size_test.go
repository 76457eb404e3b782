package desired_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
)

// A resource bigger than limits.MaxResourceBytes would make a stream event
// bigger than agents receive, and fail every full sync of its region: it is
// refused with ErrInvalid naming the field and both sizes, and nothing is
// written. Resources just under the limit are stored, and their events fit.
func TestOversizeResourcesAreRefusedAndTheLargestAccepted(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	policy := func(id, name string, spec map[string]any) desired.PolicySpec {
		return desired.PolicySpec{ID: id, WorkspaceID: "ws1", EnvironmentID: "prod", Region: "eu-west", Name: name, Spec: spec}
	}
	description := func(n int) map[string]any {
		return map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}, "description": strings.Repeat("x", n)}
	}

	// The largest: a little under the limit as stored, and as sent.
	largest := description(limits.MaxResourceBytes - 128)
	if _, err := s.EnsureCiliumPolicy(ctx, policy("pol-1", "big", largest)); err != nil {
		t.Fatalf("a policy just under the limit: %v", err)
	}
	stored := client.CiliumNetworkPolicy.GetX(ctx, "pol-1")
	event, err := structpb.NewStruct(stored.Spec)
	if err != nil || proto.Size(event) > limits.MaxResourceBytes {
		t.Fatalf("the stored spec as the stream sends it: %d bytes, %v", proto.Size(event), err)
	}
	dep := spec("api-1")
	dep.Env = map[string]string{} // eight values of nearly 128 KiB: under 1 MiB together
	for i := range 8 {
		dep.Env[fmt.Sprintf("V%d", i)] = strings.Repeat("x", limits.MaxResourceBytes/8-64)
	}
	if err := s.Deploy(ctx, dep, []string{"eu-west"}, 1); err != nil {
		t.Fatalf("a deployment just under the limit: %v", err)
	}
	before := written(t, client)

	tooBig := limits.MaxResourceBytes + 1
	overCommand := spec("api-2")
	overCommand.Command = strings.Fields(strings.Repeat(strings.Repeat("x", 100<<10)+" ", 11))
	overEnv := spec("api-3")
	overEnv.Env = map[string]string{}
	for i := range 9 {
		overEnv.Env[fmt.Sprintf("V%d", i)] = strings.Repeat("x", 120<<10)
	}
	// ICMP types are numbers, 9 bytes each in the stream's protobuf and 1
	// in JSON: this fits as stored but not as sent (Cilium takes 40 to an
	// ICMP rule).
	icmpFields := make([]any, 40)
	for i := range icmpFields {
		icmpFields[i] = map[string]any{"type": 8.0}
	}
	icmpRules := make([]any, limits.MaxResourceBytes/16/40)
	for i := range icmpRules {
		icmpRules[i] = map[string]any{"icmps": []any{map[string]any{"fields": icmpFields}}}
	}
	numbers := map[string]any{"endpointSelector": map[string]any{}, "ingress": icmpRules}
	for _, c := range []struct {
		name, field, size string
		err               error
	}{
		{"policy too big as stored", "spec", "1048697 bytes as Kubernetes stores it", policyErr(s.EnsureCiliumPolicy(ctx, policy("pol-2", "huge", description(tooBig))))},
		{"policy too big as sent", "spec", "as the stream sends it", policyErr(s.EnsureCiliumPolicy(ctx, policy("pol-3", "numbers", numbers)))},
		{"update of a stored policy", "spec", "1048697 bytes as Kubernetes stores it", policyErr(s.EnsureCiliumPolicy(ctx, policy("pol-1", "big", description(tooBig))))},
		{"command", "command", "bytes as stored (command", s.Deploy(ctx, overCommand, []string{"eu-west"}, 1)},
		{"env", "env", "bytes as stored (command", s.Deploy(ctx, overEnv, []string{"eu-west"}, 1)},
	} {
		msg := fmt.Sprint(c.err)
		if !errors.Is(c.err, desired.ErrInvalid) || !strings.HasPrefix(msg, c.field+":") ||
			!strings.Contains(msg, c.size) || !strings.Contains(msg, fmt.Sprint(limits.MaxResourceBytes)) {
			t.Errorf("%s: got %v; want ErrInvalid naming %s, its size (%q) and the limit", c.name, c.err, c.field, c.size)
		}
	}
	if after := written(t, client); after != before {
		t.Errorf("refused writes changed the database:\n before %s\n after  %s", before, after)
	}
	if got := client.CiliumNetworkPolicy.GetX(ctx, "pol-1"); len(got.Spec["description"].(string)) != limits.MaxResourceBytes-128 {
		t.Errorf("a refused update changed the stored policy")
	}
}

func policyErr(_ string, err error) error { return err }

// The deepest spec Cilium takes (11 levels: a secret of a header match of
// an HTTP rule) passes the database's own JSON check; a spec deeper than
// validate.MaxJSONDepth is bad input (it used to fail that check, a
// database error answered as Unavailable).
func TestDeepestAcceptedPolicyIsStored(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	deepest := map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{"toPorts": []any{map[string]any{
		"ports": []any{map[string]any{"port": "80", "protocol": "TCP"}},
		"rules": map[string]any{"http": []any{map[string]any{"headerMatches": []any{map[string]any{
			"name": "X-Token", "secret": map[string]any{"name": "token", "namespace": "prod"},
		}}}}},
	}}}}}
	p := desired.PolicySpec{ID: "pol-1", WorkspaceID: "ws1", EnvironmentID: "prod", Region: "eu-west", Name: "deep", Spec: deepest}
	if _, err := s.EnsureCiliumPolicy(ctx, p); err != nil {
		t.Fatalf("the deepest spec Cilium takes: %v", err)
	}
	if n := client.CiliumNetworkPolicy.Query().CountX(ctx); n != 1 {
		t.Fatalf("%d policies stored, want 1", n)
	}
	p.Spec = nestedSpec(validate.MaxJSONDepth + 1)
	if _, err := s.EnsureCiliumPolicy(ctx, p); !errors.Is(err, desired.ErrInvalid) || !strings.HasPrefix(err.Error(), "spec:") {
		t.Fatalf("a spec one level deeper: got %v, want ErrInvalid naming spec", err)
	}
}
