package reconcile_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Identity is whole (invariant I7): an ID applied in another namespace
// than before (deleted and deployed again elsewhere while the agent
// missed the delete) leaves nothing running in the old one.

// The tests below wait for the informer cache between the two applies, as
// the agent's cache would have caught up; an object it does not hold yet
// when the move applies is the agent's drift handler's (see the agent's
// TestObjectLeftBehindIsRemovedWhenItShowsUp).

func TestDeploymentMovedToAnotherNamespaceLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	nsA, nsB := e.ns, ownedNamespace(t, shared.Get(t))
	if err := e.deps.Apply(ctx, e.state("mover", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, nsA, "mover", 1)

	moved := e.state("mover", 1)
	moved.Namespace = nsB
	if err := e.deps.Apply(ctx, moved); err != nil {
		t.Fatal(err)
	}
	deploymentObjects(t, e.admin, nsA, "mover", false)
	deploymentObjects(t, e.admin, nsB, "mover", true)

	// Once the cache has seen the move, applying it again is free.
	eventually.True(t, 15*time.Second, "the cache never saw the move", func() bool {
		_, errA := e.cache.StatefulSets.StatefulSets(nsA).Get("mover")
		_, errB := e.cache.StatefulSets.StatefulSets(nsB).Get("mover")
		_, svcA := e.cache.Services.Services(nsA).Get("mover")
		_, svcB := e.cache.Services.Services(nsB).Get("mover")
		return apierrors.IsNotFound(errA) && apierrors.IsNotFound(svcA) && errB == nil && svcB == nil
	})
	before := e.counter.Writes()
	if err := e.deps.Apply(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Fatalf("re-applying the moved deployment made %d writes", n)
	}

	// A delete carries no namespace: it finds the objects where they are.
	if err := e.deps.Delete(ctx, "mover"); err != nil {
		t.Fatal(err)
	}
	deploymentObjects(t, e.admin, nsB, "mover", false)
}

func TestSentinelMovedToAnotherNamespaceLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	nsA, nsB := e.ns, ownedNamespace(t, shared.Get(t))
	sentinels := reconcile.NewSentinels(e.client, e.cache, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	state := &ctrlv1.SentinelState{SentinelId: "mover", Namespace: nsA, Image: "sentinel:1", Replicas: 1, CpuMillicores: 100, MemoryMib: 64}
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	name := naming.Sentinel("mover")
	e.waitCached(t, cachedDeployment, nsA, name, 1)

	state.Namespace = nsB
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	sentinelObjects(t, e.admin, nsA, name, false)
	sentinelObjects(t, e.admin, nsB, name, true)
	if err := sentinels.Delete(ctx, "mover"); err != nil {
		t.Fatal(err)
	}
	sentinelObjects(t, e.admin, nsB, name, false)
}

// deploymentObjects checks that a deployment's StatefulSet and Service
// exist in ns, or that neither does.
func deploymentObjects(t *testing.T, client kubernetes.Interface, ns, id string, want bool) {
	t.Helper()
	ctx := context.Background()
	_, err := client.AppsV1().StatefulSets(ns).Get(ctx, id, metav1.GetOptions{})
	present(t, "StatefulSet "+ns+"/"+id, err, want)
	_, err = client.CoreV1().Services(ns).Get(ctx, id, metav1.GetOptions{})
	present(t, "Service "+ns+"/"+id, err, want)
}

// sentinelObjects is deploymentObjects for a sentinel's Deployment and
// Service.
func sentinelObjects(t *testing.T, client kubernetes.Interface, ns, name string, want bool) {
	t.Helper()
	ctx := context.Background()
	_, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	present(t, "Deployment "+ns+"/"+name, err, want)
	_, err = client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	present(t, "Service "+ns+"/"+name, err, want)
}

func present(t *testing.T, what string, err error, want bool) {
	t.Helper()
	switch {
	case want && err != nil:
		t.Errorf("%s: %v", what, err)
	case !want && err == nil:
		t.Errorf("%s is still there", what)
	case !want && !apierrors.IsNotFound(err):
		t.Errorf("%s: %v", what, err)
	}
}
