package operator_test

import (
	"context"
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
