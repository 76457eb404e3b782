package agent_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// largestPolicySpec is a valid CiliumNetworkPolicy spec, about as big as
// ctrld accepts: one ingress rule per client address (10.x.y.z/32 on port
// 8443, from offset on), as many as keep it within size both as ctrld
// stores it (JSON) and as the stream sends it (a protobuf Struct, the
// bigger of the two here).
func largestPolicySpec(t *testing.T, size, offset int) map[string]any {
	t.Helper()
	spec := func(rules int) map[string]any {
		ingress := make([]any, rules)
		for i := range ingress {
			n := offset + i
			ingress[i] = map[string]any{
				"fromCIDR": []any{fmt.Sprintf("10.%d.%d.%d/32", n>>16&255, n>>8&255, n&255)},
				"toPorts":  []any{map[string]any{"ports": []any{map[string]any{"port": "8443", "protocol": "TCP"}}}},
			}
		}
		return map[string]any{
			"description":      "one rule per client, as big as ctrld takes",
			"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}},
			"ingress":          ingress,
		}
	}
	bytes := func(s map[string]any) int {
		stored, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		sent, err := structpb.NewStruct(s)
		if err != nil {
			t.Fatal(err)
		}
		return max(len(stored), proto.Size(sent))
	}
	// Every rule takes well over 64 bytes, so size/64 rules are too many.
	rules := sort.Search(size/64, func(n int) bool { return bytes(spec(n)) > size }) - 1
	s := spec(rules)
	t.Logf("%d ingress rules, %d bytes (limit %d)", rules, bytes(s), limits.MaxResourceBytes)
	return s
}

// The largest resource ctrld accepts goes all the way: through the
// operator API into the database, through a full sync's stream to a real
// agent, and through server-side apply into a real Kubernetes API server
// (whose etcd takes requests up to 1.5 MiB); then a change of the same
// size through the incremental stream. A resource ctrld accepts but the
// stream or Kubernetes cannot carry would fail its region's every sync.
func TestLargestAcceptedResourceReachesKubernetes(t *testing.T) {
	e := newAgentEnv(t)
	e.cluster.InstallCiliumCRD(t)
	dyn := dynamic.NewForConfigOrDie(e.cluster.Config)
	ns := naming.Namespace("big", "prod")
	put := func(spec map[string]any) {
		t.Helper()
		s, err := structpb.NewStruct(spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.op.PutCiliumNetworkPolicy(e.ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "big", WorkspaceId: "big",
			EnvironmentId: "prod", Region: "eu", Name: "clients", Spec: s}); err != nil {
			t.Fatalf("ctrld refused a spec within limits.MaxResourceBytes: %v", err)
		}
	}
	applied := func(spec map[string]any) func() bool {
		return func() bool {
			live, err := dyn.Resource(reconcile.PolicyResource).Namespace(ns).Get(e.ctx, "clients", metav1.GetOptions{})
			return err == nil && kube.Same(live.Object["spec"], spec)
		}
	}

	first := largestPolicySpec(t, limits.MaxResourceBytes-1024, 0)
	put(first)
	e.start(t, "agent-0", agent.Config{LeaderElect: false, ResyncInterval: -1})
	waitFor(t, time.Minute, "the largest policy applied by the full sync", applied(first))

	second := largestPolicySpec(t, limits.MaxResourceBytes-1024, 1) // every rule changed
	put(second)
	waitFor(t, time.Minute, "the largest policy's change applied from the stream", applied(second))
}
