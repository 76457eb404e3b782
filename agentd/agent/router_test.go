package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A deployment event whose spec hash is no label value is refused for
// good (dispatch.Terminal), so the cursor moves past it, as past a foreign
// namespace: retrying the same event cannot succeed. The refusal comes
// before any API call (the fake client would answer any).
func TestABadSpecHashIsRefusedForGood(t *testing.T) {
	client := fake.NewClientset()
	c := reconcile.NewCache(client, 0)
	r := &router{metrics: metrics.New(prometheus.NewRegistry()), controllers: reconcile.NewControllers(reconcile.Deps{
		Kube: client, Cache: c, Namespaces: reconcile.NewNamespaces(client, naming.Reserved{})})}
	ev := &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
		Action:     ctrlv1.Action_ACTION_APPLY,
		Deployment: &ctrlv1.DeploymentState{DeploymentId: "api", Namespace: "acme-prod", Image: "app:1", Replicas: 1, SpecHash: "not a label"}}}}
	err := r.Handle(context.Background(), dispatch.Key{Kind: rpc.KindDeployment, ID: "api"}, dispatch.Intent{Event: ev})
	if !dispatch.IsTerminal(err) || !errors.Is(err, kube.ErrBadEvent) {
		t.Fatalf("Handle = %v; want a terminal kube.ErrBadEvent", err)
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("the refused apply made %d API calls: %v", n, client.Actions())
	}
}
