package agent_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// clientRules makes list-heavy specs: one ingress rule per client address
// (10.x.y.z/32 on port 8443, from offset on). Server-side apply records a
// list as one field, so the object is about as big as the spec.
func clientRules(offset int) func(rules int) map[string]any {
	return func(rules int) map[string]any {
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
}

// podLabels makes map-heavy specs: an endpoint selector of as many labels,
// "k00000": "v<offset>" on, for pods denied all ingress. Server-side apply
// records every key again in the object's managedFields, so the object is
// about twice the spec.
func podLabels(offset int) func(labels int) map[string]any {
	return func(labels int) map[string]any {
		match := make(map[string]any, labels)
		for i := range labels {
			match[fmt.Sprintf("k%05d", i)] = fmt.Sprintf("v%d", offset)
		}
		return map[string]any{"endpointSelector": map[string]any{"matchLabels": match}, "ingress": []any{map[string]any{}}}
	}
}

// largestAccepted is the biggest spec(n) that ctrld accepts (it checks
// every spec with validate.CiliumPolicySpec). An entry of either shape
// costs well over 16 bytes, so spec(MaxResourceBytes/16) is too big.
func largestAccepted(t *testing.T, spec func(n int) map[string]any) map[string]any {
	t.Helper()
	n := sort.Search(limits.MaxResourceBytes/16, func(n int) bool { return validate.CiliumPolicySpec(spec(n)) != nil }) - 1
	if n < 1 {
		t.Fatalf("ctrld accepts no spec of this shape: %v", validate.CiliumPolicySpec(spec(1)))
	}
	s := spec(n)
	stored, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries, %d bytes as JSON (limit %d)", n, len(stored), limits.MaxResourceBytes)
	return s
}

// The largest resources ctrld accepts go all the way: through the operator
// API into the database, through a full sync's stream to a real agent, and
// through server-side apply into a real Kubernetes API server (whose etcd
// takes requests up to 1.5 MiB); then a change of the same size through
// the incremental stream. A resource ctrld accepts but the stream or
// Kubernetes cannot carry would fail its region's every sync. Both shapes:
// many rules (lists, which cost Kubernetes what they cost as JSON) and many
// labels (keys, which server-side apply records again: a 909 KB spec of
// them was once accepted and never applied, "etcdserver: request is too
// large").
func TestLargestAcceptedResourceReachesKubernetes(t *testing.T) {
	e := newAgentEnv(t)
	e.cluster.InstallCiliumCRD(t)
	policies := dynamic.NewForConfigOrDie(e.cluster.Config).Resource(reconcile.PolicyResource).Namespace(naming.Namespace("big", "prod"))
	shapes := map[string]func(offset int) func(n int) map[string]any{"clients": clientRules, "selector": podLabels}
	put := func(name string, spec map[string]any) {
		t.Helper()
		s, err := structpb.NewStruct(spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.op.PutCiliumNetworkPolicy(e.ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: name, WorkspaceId: "big",
			EnvironmentId: "prod", Region: "eu", Name: name, Spec: s}); err != nil {
			t.Fatalf("ctrld refused the spec validate.CiliumPolicySpec accepts: %v", err)
		}
	}
	waitApplied := func(how, name string, spec map[string]any) {
		t.Helper()
		waitFor(t, time.Minute, fmt.Sprintf("the largest %s policy applied by %s", name, how), func() bool {
			live, err := policies.Get(e.ctx, name, metav1.GetOptions{})
			return err == nil && kube.Same(live.Object["spec"], spec)
		})
		live, err := policies.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := json.Marshal(live.Object)
		t.Logf("%s: %d bytes in the API server", name, len(stored))
	}

	first := map[string]map[string]any{}
	for name, shape := range shapes {
		first[name] = largestAccepted(t, shape(0))
		put(name, first[name])
	}
	e.start(t, "agent-0", agent.Config{LeaderElect: false, ResyncInterval: -1})
	for name, spec := range first {
		waitApplied("the full sync", name, spec)
	}

	for name, shape := range shapes {
		second := largestAccepted(t, shape(1)) // every rule or label changed
		put(name, second)
		waitApplied("the stream", name, second)
	}
}
