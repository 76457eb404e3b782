package agent_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A deployment, a sentinel and a policy deleted and created again under
// their IDs in another workspace while the agent was away (so it never saw
// the deletes): the next agent's full sync lists them in the new namespace
// only, and nothing of theirs is left running in the old one. Identity is
// whole (invariant I7): garbage collection keeps them (listed by kind and
// ID), so their applies in the sync must remove what the moves left.
func TestFullSyncRemovesWhatAMissedMoveLeftBehind(t *testing.T) {
	e := newAgentEnv(t)
	e.cluster.InstallCiliumCRD(t)
	dyn := dynamic.NewForConfigOrDie(e.cluster.Config)

	put := func(workspace string) {
		t.Helper()
		deploy(t, e.op, "mover", workspace, "eu")
		if _, err := e.op.PutSentinel(e.ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: workspace, EnvironmentId: "prod",
			Region: "eu", Image: "sentinel:1", Replicas: 1, CpuMillicores: 10, MemoryMib: 16}); err != nil {
			t.Fatal(err)
		}
		spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}})
		if _, err := e.op.PutCiliumNetworkPolicy(e.ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "pol", WorkspaceId: workspace,
			EnvironmentId: "prod", Region: "eu", Name: "allow", Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	// found tells, for ns, which of the five objects exist.
	found := func(ns string) []bool {
		_, svc := e.admin.CoreV1().Services(ns).Get(e.ctx, "mover", metav1.GetOptions{})
		_, sentinel := e.admin.AppsV1().Deployments(ns).Get(e.ctx, naming.Sentinel("gw"), metav1.GetOptions{})
		_, sentinelSvc := e.admin.CoreV1().Services(ns).Get(e.ctx, naming.Sentinel("gw"), metav1.GetOptions{})
		_, policy := dyn.Resource(reconcile.PolicyResource).Namespace(ns).Get(e.ctx, "allow", metav1.GetOptions{})
		return []bool{statefulSetExists(e.admin, ns, "mover"), svc == nil, sentinel == nil, sentinelSvc == nil, policy == nil}
	}
	all := func(ns string) bool { return !slices.Contains(found(ns), false) }
	none := func(ns string) bool { return !slices.Contains(found(ns), true) }

	nsA, nsB := naming.Namespace("move-a", "prod"), naming.Namespace("move-b", "prod")
	put("move-a")
	stop := e.start(t, "agent-0", agent.Config{LeaderElect: false})
	waitFor(t, 30*time.Second, "everything applied in "+nsA, func() bool { return all(nsA) })
	stop()

	if _, err := e.op.DeleteDeployment(e.ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "mover"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.op.DeleteSentinel(e.ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: "gw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.op.DeleteCiliumNetworkPolicy(e.ctx, &ctrlv1.DeleteCiliumNetworkPolicyRequest{PolicyId: "pol"}); err != nil {
		t.Fatal(err)
	}
	put("move-b")
	e.start(t, "agent-1", agent.Config{LeaderElect: false, ResyncInterval: -1})
	waitFor(t, 30*time.Second, "everything applied in "+nsB+" and nothing left in "+nsA, func() bool {
		return all(nsB) && none(nsA)
	})
}

// An object of a deployment showing up in another namespace than the
// deployment's (the informer cache had not caught up with it when the move
// applied; here it is created by hand) is removed when the cache sees it:
// no resync, no new change.
func TestObjectLeftBehindIsRemovedWhenItShowsUp(t *testing.T) {
	e := newAgentEnv(t)
	deploy(t, e.op, "api", "found-b", "eu")
	e.start(t, "agent-0", agent.Config{LeaderElect: false, ResyncInterval: -1})
	nsA, nsB := e.cluster.NamespaceLabeled(t, ownedLabels), naming.Namespace("found-b", "prod")
	waitFor(t, 20*time.Second, "applied in "+nsB, func() bool { return statefulSetExists(e.admin, nsB, "api") })

	labels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: "api"}
	left := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: nsA, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}},
		}}
	if _, err := e.admin.AppsV1().StatefulSets(nsA).Create(e.ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the object in "+nsA+" removed", func() bool { return !statefulSetExists(e.admin, nsA, "api") })
	if !statefulSetExists(e.admin, nsB, "api") {
		t.Fatal("the deployment's own StatefulSet was removed")
	}
}
