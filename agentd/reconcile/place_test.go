package reconcile_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// LeftBehind, which the agent asks when an object shows up, agrees with
// where the applies put the objects: none of what an apply wrote is left
// behind, and the same objects are once the resource applies elsewhere.
func TestLeftBehindAgreesWithTheApplies(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sentinels := reconcile.NewSentinels(e.client, e.cache, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	deployment := e.state("placed", 1)
	sentinel := &ctrlv1.SentinelState{SentinelId: "placed", Namespace: e.ns, Image: "sentinel:1", Replicas: 1, CpuMillicores: 100, MemoryMib: 64}
	if err := e.deps.Apply(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	if err := sentinels.Apply(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	deploymentEvent := &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: deployment}}}
	sentinelEvent := &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Sentinel{
		Sentinel: &ctrlv1.SentinelEvent{Action: ctrlv1.Action_ACTION_APPLY, Sentinel: sentinel}}}

	opts := metav1.ListOptions{LabelSelector: kube.ManagedSelector}
	sets, err := e.admin.AppsV1().StatefulSets(e.ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := e.admin.AppsV1().Deployments(e.ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := e.admin.CoreV1().Services(e.ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	type written struct {
		ev  *ctrlv1.DeploymentChangeEvent
		obj metav1.Object
	}
	var all []written
	for i := range sets.Items {
		all = append(all, written{deploymentEvent, &sets.Items[i]})
	}
	for i := range deps.Items {
		all = append(all, written{sentinelEvent, &deps.Items[i]})
	}
	for i := range svcs.Items {
		ev := sentinelEvent
		if svcs.Items[i].Labels[kube.DeploymentLabel] != "" {
			ev = deploymentEvent
		}
		all = append(all, written{ev, &svcs.Items[i]})
	}
	if len(all) != 4 {
		t.Fatalf("the applies wrote %d objects, want 4", len(all))
	}
	for _, w := range all {
		if reconcile.LeftBehind(w.ev, w.obj) {
			t.Errorf("%s/%s, just applied, counts as left behind", w.obj.GetNamespace(), w.obj.GetName())
		}
	}
	deployment.Namespace, sentinel.Namespace = "elsewhere", "elsewhere"
	for _, w := range all {
		if !reconcile.LeftBehind(w.ev, w.obj) {
			t.Errorf("%s/%s does not count as left behind once its resource applies elsewhere", w.obj.GetNamespace(), w.obj.GetName())
		}
	}

	policy := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "p", Namespace: e.ns, Name: "allow"}
	policyEvent := &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy{
		CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyEvent{Action: ctrlv1.Action_ACTION_APPLY, CiliumNetworkPolicy: policy}}}
	for name, want := range map[string]bool{"allow": false, "allow-old": true} {
		if got := reconcile.LeftBehind(policyEvent, &metav1.ObjectMeta{Namespace: e.ns, Name: name}); got != want {
			t.Errorf("policy object %q: left behind %v, want %v", name, got, want)
		}
	}
	if reconcile.LeftBehind(&ctrlv1.DeploymentChangeEvent{}, &metav1.ObjectMeta{Namespace: e.ns, Name: "x"}) {
		t.Error("an event of no kind counts as placing its objects somewhere")
	}
}
