package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// agentSA is the agent's service account in agentd.yaml, as the API
// server names its requests.
const agentSA = "system:serviceaccount:deploysync:agentd"

// boundaryMessage starts the refusals of agentd.yaml's
// ValidatingAdmissionPolicy; RBAC's refusals say something else.
const boundaryMessage = "deploysync tenant boundary"

// The shipped ValidatingAdmissionPolicy makes the tenant boundary the API
// server's rule for the agent's service account (impersonated here, with
// the shipped ClusterRole, which alone would allow all of it): a write
// into kube-system, into a namespace without the managed-by label, or
// into its own namespace (its Lease aside) is refused, and so are a
// namespace with a reserved name or without the label, and labeling
// someone else's namespace; writes into a namespace labeled as the
// agent's pass, and so does a namespace it creates labeled.
func TestTheAgentsServiceAccountWritesOnlyInItsNamespaces(t *testing.T) {
	c := shared.Get(t)
	applyManifest(t, c, "agentd.yaml")
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(c.Config)
	owned := "tenant-prod"
	theirs := "someone-else"
	for ns, labels := range map[string]map[string]string{owned: {"unkey.managed.by": "krane"}, theirs: nil} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:deploysync", "system:authenticated"}}
	agent := kubernetes.NewForConfigOrDie(cfg)
	service := func(ns string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns,
			Labels: map[string]string{"unkey.managed.by": "krane", "unkey.deployment.id": "api"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}
	}
	createService := func(ns string, opts metav1.CreateOptions) error {
		_, err := agent.CoreV1().Services(ns).Create(ctx, service(ns), opts)
		return err
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), boundaryMessage) {
			t.Errorf("%s: got %v, want the tenant boundary's refusal", what, err)
		}
	}

	// The policy takes effect once the API server has loaded it: a dry
	// run writes nothing, and is admitted as the write would be.
	eventually.True(t, 20*time.Second, "the policy never refused the agent's write into kube-system", func() bool {
		err := createService("kube-system", metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), boundaryMessage)
	})

	refused("a Service in kube-system", createService("kube-system", metav1.CreateOptions{}))
	refused("a Service in a namespace without the label", createService(theirs, metav1.CreateOptions{}))
	refused("a Service in the agent's own namespace", createService("deploysync", metav1.CreateOptions{}))
	if err := createService(owned, metav1.CreateOptions{}); err != nil {
		t.Errorf("a Service in the agent's namespace: %v", err)
	}
	if err := agent.CoreV1().Services(owned).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting it: %v", err)
	}

	// Objects carrying the agent's labels in someone else's namespace are
	// not its to delete.
	if _, err := admin.CoreV1().Services(theirs).Create(ctx, service(theirs), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("deleting a labeled Service in someone else's namespace", agent.CoreV1().Services(theirs).Delete(ctx, "api", metav1.DeleteOptions{}))

	namespace := func(name string, labels map[string]string) error {
		_, err := agent.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	ours := map[string]string{"unkey.managed.by": "krane"}
	refused("creating kube-tenant", namespace("kube-tenant", ours))
	refused("creating istio-system", namespace("istio-system", ours))
	for _, addOn := range naming.AddOnNamespaces { // the policy's list is naming's
		refused("creating "+addOn, namespace(addOn, ours))
	}
	refused("creating a namespace without the label", namespace("acme-dev", nil))
	if err := namespace("acme-dev", ours); err != nil {
		t.Errorf("creating a labeled namespace: %v", err)
	}
	_, err := agent.CoreV1().Namespaces().Patch(ctx, theirs, types.MergePatchType, []byte(`{"metadata":{"labels":{"unkey.managed.by":"krane"}}}`), metav1.PatchOptions{})
	refused("labeling someone else's namespace", err)

	// Leader election goes on: the Lease in its own namespace.
	_, err = agent.CoordinationV1().Leases("deploysync").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "agentd-eu-west"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("the agent's Lease: %v", err)
	}
}

// A namespace an admin takes back (removes the label from) while the
// agent still trusts what it read of it: the policy refuses the agent's
// next write there as Forbidden, and the agent, reading the namespace
// again, takes that as its own refusal (kube.ErrForeignNamespace, which
// the dispatcher does not retry and lets the cursor pass), not as an
// error retried for good, holding the region's cursor.
func TestAWriteThePolicyRefusesIsTheAgentsRefusal(t *testing.T) {
	c := shared.Get(t)
	applyManifest(t, c, "agentd.yaml")
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(c.Config)
	ns := "takenback-prod"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{kube.ManagedByLabel: kube.ManagedByValue}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:deploysync", "system:authenticated"}}
	client := kubernetes.NewForConfigOrDie(cfg)
	cache := reconcile.NewCache(client, 0)
	cacheCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := cache.Start(cacheCtx); err != nil {
		t.Fatal(err)
	}
	deps := reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client, naming.Reserved{}))
	state := func(replicas int32) *ctrlv1.DeploymentState {
		return &ctrlv1.DeploymentState{DeploymentId: "api", Namespace: ns, Image: "app:1", Replicas: replicas,
			CpuMillicores: 100, MemoryMib: 64, Port: 8080}
	}
	// The policy takes effect once loaded (see above).
	eventually.True(t, 20*time.Second, "the policy never refused the agent's write into kube-system", func() bool {
		_, err := client.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), boundaryMessage)
	})
	if err := deps.Apply(ctx, state(1)); err != nil {
		t.Fatalf("apply into the agent's namespace: %v", err)
	}
	// The cache holds what was written, so the next apply updates it.
	eventually.True(t, 20*time.Second, "the informer cache never held the applied objects", func() bool {
		_, errS := cache.StatefulSets.StatefulSets(ns).Get("api")
		_, errV := cache.Services.Services(ns).Get("api")
		return errS == nil && errV == nil
	})
	got, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(got.Labels, kube.ManagedByLabel)
	if _, err := admin.CoreV1().Namespaces().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Written at once, while the agent still trusts what it knew: the
	// API server refuses it.
	err = deps.Apply(ctx, state(2))
	if !errors.Is(err, kube.ErrForeignNamespace) || !strings.Contains(err.Error(), "namespace "+ns+" ") || !strings.Contains(err.Error(), boundaryMessage) {
		t.Errorf("the write the policy refused: got %v, want the agent's refusal naming the namespace, with the API server's words", err)
	}
	if sts, err := admin.AppsV1().StatefulSets(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil || *sts.Spec.Replicas != 1 {
		t.Errorf("the StatefulSet in the namespace taken back changed: %v", err)
	}
}
