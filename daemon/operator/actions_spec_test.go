package operator_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A protobuf Struct can carry NaN and ±Inf, which JSON cannot: they are
// refused, not stored as the strings "NaN" and "Infinity" the client never
// sent.
func TestNonFinitePolicyNumbersAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	for name, n := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		spec := &structpb.Struct{Fields: map[string]*structpb.Value{
			"endpointSelector": structpb.NewStructValue(&structpb.Struct{}),
			"description":      structpb.NewNumberValue(n),
		}}
		_, err := op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "p1",
			WorkspaceId: "ws", EnvironmentId: "prod", Region: "eu", Name: "p", Spec: spec})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "spec:") {
			t.Errorf("%s: got %v, want InvalidArgument naming the spec", name, err)
		}
	}
	if n := env.DB.Ent.CiliumNetworkPolicy.Query().Where(ciliumnetworkpolicy.Region("eu")).CountX(ctx); n != 0 {
		t.Fatalf("%d policies stored from refused calls", n)
	}
}

// A policy Cilium would refuse (its CRD at admission, or its agent when it
// reads the object) is refused here, InvalidArgument naming the field, and
// writes no desired state: no policy row, no change for the stream, no
// namespace claim. Before, each was stored, applied, reported in sync, and
// never enforced.
func TestPoliciesCiliumRefusesWriteNothing(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	put := func(name string, spec map[string]any) error {
		s, err := structpb.NewStruct(spec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: name,
			WorkspaceId: "ws", EnvironmentId: "prod", Region: "eu", Name: name, Spec: s})
		return err
	}
	written := func() string {
		db := env.DB.Ent
		return fmt.Sprintf("%d policies, %d changes, %d namespaces", db.CiliumNetworkPolicy.Query().CountX(ctx),
			db.DeploymentChange.Query().CountX(ctx), db.Namespace.Query().CountX(ctx))
	}
	api := map[string]any{"matchLabels": map[string]any{"app": "api"}}
	before := written()
	for _, c := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"node-selector", map[string]any{"nodeSelector": map[string]any{}, "ingress": []any{map[string]any{}}},
			`spec: invalid: nodeSelector: a namespaced CiliumNetworkPolicy cannot select nodes (Cilium refuses it: "rule cannot have NodeSelector"`},
		{"no-rule", map[string]any{"endpointSelector": api, "ingress": []any{}, "egress": []any{}},
			"spec: invalid: has no rule: Cilium requires at least one ingress, ingressDeny, egress or egressDeny rule"},
		{"port", map[string]any{"endpointSelector": api, "egress": []any{map[string]any{"toPorts": []any{map[string]any{"ports": []any{
			map[string]any{"port": "53", "protocol": "UDP"}, map[string]any{"port": "70000", "protocol": "TCP"}}}}}}},
			`spec: invalid: egress[0].toPorts[0].ports[1].port: "70000" is not a port`},
		{"protocol", map[string]any{"endpointSelector": api, "ingress": []any{map[string]any{"toPorts": []any{map[string]any{"ports": []any{
			map[string]any{"port": "80", "protocol": "HTTP"}}}}}}},
			`spec: invalid: ingress[0].toPorts[0].ports[0].protocol: "HTTP" is not one of TCP, UDP, SCTP, VRRP, IGMP, ANY`},
		{"cidr", map[string]any{"endpointSelector": api, "egress": []any{map[string]any{"toCIDRSet": []any{
			map[string]any{"cidr": "10.0.0.0/16", "except": []any{"10.1.0.0/24"}}}}}},
			"spec: invalid: egress[0].toCIDRSet[0].except[0]: 10.1.0.0/24 is not inside cidr 10.0.0.0/16"},
		{"entity", map[string]any{"endpointSelector": api, "ingress": []any{map[string]any{"fromEntities": []any{"internet"}}}},
			`spec: invalid: ingress[0].fromEntities[0]: "internet" is not one of all, world, cluster`},
		{"selector", map[string]any{"endpointSelector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "app", "operator": "In"}}}, "ingress": []any{map[string]any{}}},
			"spec: invalid: endpointSelector.matchExpressions[0].values: must hold at least one value for operator In"},
	} {
		err := put(c.name, c.spec)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: got %v, want InvalidArgument %q", c.name, err, c.want)
		}
	}
	if after := written(); after != before {
		t.Errorf("refused policies wrote desired state: before %s, after %s", before, after)
	}

	// The same calls with the spec mended are taken: the counts above can
	// see a write.
	if err := put("mended", map[string]any{"endpointSelector": api, "egress": []any{map[string]any{"toPorts": []any{map[string]any{"ports": []any{
		map[string]any{"port": "53", "protocol": "UDP"}}}}}}}); err != nil {
		t.Fatal(err)
	}
	if after := written(); after == before {
		t.Errorf("an accepted policy wrote nothing: %s", after)
	}
}
