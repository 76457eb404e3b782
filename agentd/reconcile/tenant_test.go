package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The agent's half of the tenant boundary, whatever the stream says: a
// deployment, sentinel or policy in a reserved namespace (kube-*, default,
// deploysync, the agent's own and the extra ones it is given) or in one
// that exists without the managed-by label (someone else's) is refused
// with kube.ErrForeignNamespace naming the namespace, and nothing is
// written: no object, no label on their namespace.
func TestApplyIntoANamespaceNotTheAgentsIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	theirs := cluster.Namespace(t) // created by someone else: no managed-by label
	namespaces := reconcile.NewNamespaces(e.client, naming.MustReserved("platform-agents"))
	deps := reconcile.NewDeployments(e.client, e.cache, namespaces)
	sentinels := reconcile.NewSentinels(e.client, e.cache, namespaces)
	policies := reconcile.NewPolicies(dynamic.NewForConfigOrDie(e.counter.Wrap(cluster.Config)), namespaces)
	spec, err := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"k8s-app": "kube-dns"}},
		"egress": []any{map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}

	before := e.counter.Writes()
	refusedIn := []string{"kube-system", "kube-public", "default", "deploysync", "platform-agents", theirs}
	for _, ns := range refusedIn {
		// An ID per namespace: one ID applied in several would be a move.
		deployment := e.state("refused-"+ns, 1)
		deployment.Namespace = ns
		for what, err := range map[string]error{
			"deployment": deps.Apply(ctx, deployment),
			"sentinel": sentinels.Apply(ctx, &ctrlv1.SentinelState{SentinelId: "gw-" + ns, Namespace: ns, Image: "sentinel:1", Replicas: 1,
				CpuMillicores: 100, MemoryMib: 64}),
			"policy": policies.Apply(ctx, &ctrlv1.CiliumNetworkPolicyState{PolicyId: "dns-down-" + ns, Namespace: ns, Name: "dns-down", Spec: spec}),
		} {
			if !errors.Is(err, kube.ErrForeignNamespace) || !strings.Contains(err.Error(), "namespace "+ns+" ") {
				t.Errorf("%s into %s: got %v, want it refused naming the namespace", what, ns, err)
			}
		}
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Errorf("refused applies made %d API writes", n)
	}
	for _, ns := range refusedIn {
		if _, err := e.admin.AppsV1().StatefulSets(ns).Get(ctx, "refused-"+ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a StatefulSet in %s: %v", ns, err)
		}
	}
	got, err := e.admin.CoreV1().Namespaces().Get(ctx, theirs, metav1.GetOptions{})
	if err != nil || kube.Managed(got.Labels) {
		t.Errorf("someone else's namespace %s was taken over: %v %v", theirs, got.GetLabels(), err)
	}

	// Handed over by a cluster admin (labeled), it is the agent's: the
	// next apply (a full sync's, say) goes in.
	got.Labels = map[string]string{kube.ManagedByLabel: kube.ManagedByValue}
	if _, err := e.admin.CoreV1().Namespaces().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deployment := e.state("refused-"+theirs, 1)
	deployment.Namespace = theirs
	if err := deps.Apply(ctx, deployment); err != nil {
		t.Fatalf("apply into the namespace handed over: %v", err)
	}
}

// Deletes, garbage collection and the removal of what a move left behind
// act only inside the agent's own namespaces: an object carrying the
// managed-by and ID labels in someone else's namespace (labeled there by
// someone who may patch it but not delete it) is never deleted, nor
// listed as present for garbage collection.
func TestDeletesActOnlyInTheAgentsNamespaces(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	theirs := shared.Get(t).Namespace(t)
	labels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: "stray"}
	foreign := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: theirs, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "theirs:1"}}}},
		}}
	if _, err := e.admin.AppsV1().StatefulSets(theirs).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 15*time.Second, "the cache never held the StatefulSet in the other namespace", func() bool { // the cache holds it, as it would at a full sync
		_, err := e.cache.StatefulSets.StatefulSets(theirs).Get("stray")
		return err == nil
	})
	kept := func(step string) {
		t.Helper()
		if _, err := e.admin.AppsV1().StatefulSets(theirs).Get(ctx, "stray", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: the labeled StatefulSet in someone else's namespace is gone: %v", step, err)
		}
	}

	// The resource applied in its own namespace: the object elsewhere is
	// not left behind by a move of the agent's.
	if err := e.deps.Apply(ctx, e.state("stray", 1)); err != nil {
		t.Fatal(err)
	}
	kept("apply elsewhere")
	// Garbage collection lists the one in the agent's namespace, and
	// nothing in the other.
	controllers := reconcile.NewControllers(reconcile.Deps{Kube: e.client, Cache: e.cache, Namespaces: reconcile.NewNamespaces(e.client, naming.Reserved{}),
		Dynamic: dynamic.NewForConfigOrDie(shared.Get(t).Config)})
	eventually.True(t, 15*time.Second, "the cache never held the agent's own StatefulSet", func() bool { // the cache holds the agent's own, too
		_, err := e.cache.StatefulSets.StatefulSets(e.ns).Get("stray")
		return err == nil
	})
	present, err := controllers.Present(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(slices.Clone(present), func(r rpc.Resource) bool { return r.ID != "stray" })); n != 1 {
		t.Errorf("present for garbage collection: %v; want stray once, in the agent's namespace", present)
	}
	// Deleted (from the stream, or by garbage collection): its own objects
	// go, the one in someone else's namespace stays.
	if err := e.deps.Delete(ctx, "stray"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "stray", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deployment's own StatefulSet was not deleted: %v", err)
	}
	kept("delete")
}

// A namespace stops being the agent's when an admin takes it back
// (removes the managed-by label) while the agent runs: once what the
// agent knew of it is older than KnownFor, the next apply there is
// refused with kube.ErrForeignNamespace and writes nothing, and deletes
// (garbage collection's too) leave its objects alone; labeled again, it
// is the agent's again.
func TestANamespaceTakenBackIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	namespaces := reconcile.NewNamespaces(e.client, naming.Reserved{})
	namespaces.KnownFor = 100 * time.Millisecond
	deps := reconcile.NewDeployments(e.client, e.cache, namespaces)
	for _, id := range []string{"kept", "stopped"} {
		if err := deps.Apply(ctx, e.state(id, 1)); err != nil {
			t.Fatal(err)
		}
		e.waitCached(t, cachedStatefulSet, e.ns, id, 1)
	}
	relabel := func(labels map[string]string) {
		t.Helper()
		got, err := e.admin.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Labels = labels
		if _, err := e.admin.CoreV1().Namespaces().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel(nil)
	time.Sleep(2 * namespaces.KnownFor)

	before := e.counter.Writes()
	if err := deps.Apply(ctx, e.state("kept", 3)); !errors.Is(err, kube.ErrForeignNamespace) || !strings.Contains(err.Error(), "namespace "+e.ns+" ") {
		t.Errorf("apply into the namespace taken back: got %v, want it refused naming the namespace", err)
	}
	if err := deps.Delete(ctx, "stopped"); err != nil {
		t.Errorf("delete in the namespace taken back: %v", err)
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Errorf("the namespace taken back got %d API writes", n)
	}
	for _, id := range []string{"kept", "stopped"} {
		sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, id, metav1.GetOptions{})
		if err != nil || *sts.Spec.Replicas != 1 {
			t.Errorf("StatefulSet %s in the namespace taken back changed: %v", id, err)
		}
	}

	relabel(map[string]string{kube.ManagedByLabel: kube.ManagedByValue})
	if err := deps.Apply(ctx, e.state("kept", 3)); err != nil {
		t.Errorf("apply into the namespace handed back: %v", err)
	}
}
