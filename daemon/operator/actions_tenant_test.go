package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The tenant boundary: a workspace/environment pair whose namespace is
// reserved (kube-*, *-system, the add-ons', default, the agent's own, and
// --reserved-namespaces)
// is refused as InvalidArgument by every call that takes a pair, naming
// the pair and the namespace, and nothing is written: no resource, no
// namespace claim, no change row. ("default" and "deploysync" have no
// hyphen, so no pair makes them; naming's TestReservedPairs says so.)
func TestReservedNamespacesAreRefused(t *testing.T) {
	// The agents run in platform-agents here: the operator lists it.
	// cert-manager, ingress-nginx and every *-system are reserved anyway
	// (the add-ons' namespaces).
	env := servertest.Start(t, server.Config{Reserved: naming.MustReserved("platform-agents")})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	spec, err := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}, "egress": []any{map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ ws, env, ns string }{
		{"kube", "system", "kube-system"},
		{"kube", "public", "kube-public"},
		{"kube-node", "lease", "kube-node-lease"},
		{"platform", "agents", "platform-agents"},
		{"cert", "manager", "cert-manager"},
		{"ingress", "nginx", "ingress-nginx"},
		{"istio", "system", "istio-system"},
		{"flux", "system", "flux-system"},
	} {
		calls := map[string]func() error{
			"Deploy": func() error {
				_, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api-" + p.ws + "-" + p.env, WorkspaceId: p.ws, EnvironmentId: p.env,
					Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1})
				return err
			},
			"PutSentinel": func() error {
				_, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw-" + p.ws + "-" + p.env, WorkspaceId: p.ws, EnvironmentId: p.env,
					Region: "eu", Image: "sentinel:1", Replicas: 1, CpuMillicores: 10, MemoryMib: 16})
				return err
			},
			"PutCiliumNetworkPolicy": func() error {
				_, err := op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "pol-" + p.ws + "-" + p.env, WorkspaceId: p.ws,
					EnvironmentId: p.env, Region: "eu", Name: "dns-down", Spec: spec})
				return err
			},
		}
		for name, call := range calls {
			err := call()
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(msg, "workspace_id, environment_id:") ||
				!strings.Contains(msg, fmt.Sprintf("workspace %s environment %s", p.ws, p.env)) || !strings.Contains(msg, fmt.Sprintf("%q", p.ns)) {
				t.Errorf("%s into %s: got %v, want InvalidArgument naming the workspace, environment and namespace", name, p.ns, err)
			}
		}
	}
	db := env.DB.Ent
	if got := fmt.Sprintf("%d deployments, %d sentinels, %d policies, %d namespace claims, %d change rows",
		db.Deployment.Query().CountX(ctx), db.Sentinel.Query().CountX(ctx), db.CiliumNetworkPolicy.Query().CountX(ctx),
		db.Namespace.Query().CountX(ctx), db.DeploymentChange.Query().CountX(ctx)); got != "0 deployments, 0 sentinels, 0 policies, 0 namespace claims, 0 change rows" {
		t.Errorf("refused calls wrote: %s", got)
	}

	// A pair next to them is served as before.
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "kubex", EnvironmentId: "systems",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Errorf("deploy of kubex/systems: %v", err)
	}
}
