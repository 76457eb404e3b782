package reconcile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func TestSentinelBecomesDeploymentAndService(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sentinels := reconcile.NewSentinels(e.client, e.cache, reconcile.NewNamespaces(e.client))
	state := &ctrlv1.SentinelState{SentinelId: "gw", Namespace: e.ns, Image: "sentinel:1", Replicas: 2, CpuMillicores: 100, MemoryMib: 64}
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	name := reconcile.SentinelName("gw")
	dep, err := e.admin.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 2 || dep.Labels[kube.SentinelLabel] != "gw" || dep.Spec.Template.Spec.Containers[0].Image != "sentinel:1" {
		t.Errorf("deployment %+v", dep.Spec)
	}
	svc, err := e.admin.CoreV1().Services(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("service %+v %v", svc, err)
	}
	// The no-op apply below reads both objects from the cache.
	waitFor(t, func() bool {
		d, err := e.cache.Deployments.Deployments(e.ns).Get(name)
		s, serr := e.cache.Services.Services(e.ns).Get(name)
		return err == nil && d.Annotations[kube.HashAnnotation] != "" && serr == nil && s.Annotations[kube.HashAnnotation] != ""
	})
	before := e.counter.writes.Load()
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.writes.Load() - before; n != 0 {
		t.Fatalf("no-op sentinel apply made %d writes", n)
	}
	if err := sentinels.Delete(ctx, "gw"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deployment not deleted: %v", err)
	}
}

// Without the CRD a policy fails with a clear error; once Cilium's CRD is
// installed it is applied, left alone when unchanged, and deleted.
func TestCiliumPolicyThroughTheDynamicClient(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(e.counter.wrap(shared.Get(t).Config))
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}})
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "pol", Namespace: e.ns, Name: "allow-api", DeploymentId: "api", Spec: spec}

	if err := policies.Apply(ctx, state); !errors.Is(err, reconcile.ErrNoCRD) {
		t.Fatalf("without the CRD: got %v, want ErrNoCRD", err)
	}
	shared.Get(t).InstallCiliumCRD(t)
	waitFor(t, func() bool { return policies.Apply(ctx, state) == nil })
	obj, err := dyn.Resource(reconcile.PolicyResource).Namespace(e.ns).Get(ctx, "allow-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.GetLabels()[kube.ManagedByLabel] != "krane" || obj.GetLabels()[kube.PolicyLabel] != "pol" {
		t.Errorf("labels %v", obj.GetLabels())
	}
	before := e.counter.writes.Load()
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.writes.Load() - before; n != 0 {
		t.Fatalf("no-op policy apply made %d writes", n)
	}
	ids, err := policies.Present(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "pol" {
		t.Fatalf("present: %v %v", ids, err)
	}
	if err := policies.Delete(ctx, "pol"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(reconcile.PolicyResource).Namespace(e.ns).Get(ctx, "allow-api", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("policy not deleted: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
