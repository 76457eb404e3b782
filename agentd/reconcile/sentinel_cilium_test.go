package reconcile_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func TestSentinelBecomesDeploymentAndService(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sentinels := reconcile.NewSentinels(e.client, e.cache, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	state := &ctrlv1.SentinelState{SentinelId: "gw", Namespace: e.ns, Image: "sentinel:1", Replicas: 2, CpuMillicores: 100, MemoryMib: 64}
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	name := naming.Sentinel("gw")
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
	e.waitCached(t, cachedDeployment, e.ns, name, 2)
	before := e.counter.Writes()
	if err := sentinels.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.Writes() - before; n != 0 {
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
	dyn := dynamic.NewForConfigOrDie(e.counter.Wrap(shared.Get(t).Config))
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}})
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "pol", Namespace: e.ns, Name: "allow-api", DeploymentId: "api", Spec: spec}

	if err := policies.Apply(ctx, state); !errors.Is(err, reconcile.ErrNoCRD) {
		t.Fatalf("without the CRD: got %v, want ErrNoCRD", err)
	}
	shared.Get(t).InstallCiliumCRD(t)
	eventually.True(t, 15*time.Second, "the policy never applied once its CRD was installed", func() bool { return policies.Apply(ctx, state) == nil })
	obj, err := dyn.Resource(reconcile.PolicyResource).Namespace(e.ns).Get(ctx, "allow-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.GetLabels()[kube.ManagedByLabel] != "krane" || obj.GetLabels()[kube.PolicyLabel] != "pol" {
		t.Errorf("labels %v", obj.GetLabels())
	}
	before := e.counter.Writes()
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Fatalf("no-op policy apply made %d writes", n)
	}
	present, err := policies.Present(ctx)
	if want := (reconcile.Placed{ID: "pol", Namespace: e.ns, Name: "allow-api"}); err != nil || len(present) != 1 || present[0] != want {
		t.Fatalf("present: %v %v", present, err)
	}
	if err := policies.Delete(ctx, "pol"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(reconcile.PolicyResource).Namespace(e.ns).Get(ctx, "allow-api", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("policy not deleted: %v", err)
	}
}

// A policy with numbers in its spec (ports, ICMP types) re-applied
// unchanged makes no write: the desired spec's float64s and the live
// object's int64s compare equal.
func TestCiliumPolicyWithNumbersIsANoOpWhenUnchanged(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	shared.Get(t).InstallCiliumCRD(t)
	dyn := dynamic.NewForConfigOrDie(e.counter.Wrap(shared.Get(t).Config))
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, err := structpb.NewStruct(map[string]any{
		"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}},
		"ingress": []any{map[string]any{
			"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "8080", "endPort": 8090, "protocol": "TCP"}}}},
			"icmps":   []any{map[string]any{"fields": []any{map[string]any{"type": 8, "family": "IPv4"}}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "num", Namespace: e.ns, Name: "numbers", Spec: spec}
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	before := e.counter.Writes()
	for range 3 {
		if err := policies.Apply(ctx, state); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Fatalf("unchanged policy with numeric fields re-applied: %d writes", n)
	}
}

// A managed policy object labelled with another policy's ID (a policy
// deleted, and a namesake created before the delete ran) is a conflict for
// the newcomer's apply, and is left as it is.
func TestPolicyOwnedByAnotherIsNotTakenOver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	admin := dynamic.NewForConfigOrDie(cluster.Config)
	old := policyObject(e.ns, "allow-api", "p1")
	created, err := admin.Resource(reconcile.PolicyResource).Namespace(e.ns).Create(ctx, old, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policies := reconcile.NewPolicies(dynamic.NewForConfigOrDie(cluster.Config), reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "new"}}})
	err = policies.Apply(ctx, &ctrlv1.CiliumNetworkPolicyState{PolicyId: "p2", Namespace: e.ns, Name: "allow-api", Spec: spec})
	if !errors.Is(err, kube.ErrOwnedByAnother) {
		t.Fatalf("got %v, want ErrOwnedByAnother", err)
	}
	got, err := admin.Resource(reconcile.PolicyResource).Namespace(e.ns).Get(ctx, "allow-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != created.GetResourceVersion() || got.GetLabels()[kube.PolicyLabel] != "p1" {
		t.Fatalf("the other policy's object was modified: labels %v", got.GetLabels())
	}
}

// Someone else's policy created under the name between the agent's read
// (which found the name free) and its apply, or swapped in for the
// agent's own object in between, is not taken over: the apply carries
// what the read saw as a precondition.
func TestPolicyCreatedOrSwappedAfterTheReadIsNotTakenOver(t *testing.T) {
	for _, swap := range []bool{false, true} {
		t.Run(map[bool]string{false: "created", true: "swapped"}[swap], func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			cluster := shared.Get(t)
			cluster.InstallCiliumCRD(t)
			admin := dynamic.NewForConfigOrDie(cluster.Config).Resource(reconcile.PolicyResource).Namespace(e.ns)
			spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "new"}}})
			state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "p1", Namespace: e.ns, Name: "allow-api", Spec: spec}
			if swap {
				ours := reconcile.NewPolicies(dynamic.NewForConfigOrDie(cluster.Config), reconcile.NewNamespaces(e.client, naming.Reserved{}))
				if err := ours.Apply(ctx, state); err != nil {
					t.Fatal(err)
				}
				state.Spec, _ = structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}}) // something to write
			}
			theirs := policyObject(e.ns, "allow-api", "")
			theirs.SetLabels(map[string]string{"app": "theirs"})
			var raced atomic.Bool
			cfg := rest.CopyConfig(cluster.Config)
			cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp, err := next.RoundTrip(r)
					if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/allow-api") && raced.CompareAndSwap(false, true) {
						if swap {
							if err := admin.Delete(ctx, "allow-api", metav1.DeleteOptions{}); err != nil {
								t.Errorf("delete ours: %v", err)
							}
						}
						if _, err := admin.Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
							t.Errorf("create theirs: %v", err)
						}
					}
					return resp, err
				})
			})
			policies := reconcile.NewPolicies(dynamic.NewForConfigOrDie(cfg), reconcile.NewNamespaces(e.client, naming.Reserved{}))
			if err := policies.Apply(ctx, state); err == nil {
				t.Error("the apply over their policy, made after the read, succeeded; want it refused")
			}
			if !raced.Load() {
				t.Fatal("their policy was never created; the test proves nothing")
			}
			got, err := admin.Get(ctx, "allow-api", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetLabels()[kube.ManagedByLabel] != "" || got.GetLabels()["app"] != "theirs" {
				t.Errorf("their policy was taken over: labels %v", got.GetLabels())
			}
			// The retry reads theirs and says so.
			if err := policies.Apply(ctx, state); !errors.Is(err, kube.ErrConflict) {
				t.Errorf("the retry: got %v, want a conflict", err)
			}
		})
	}
}

// A delete does not remove an object that changed after it was listed:
// here p2 relabels p1's object (the race the apply check above narrows but
// cannot close: it reads, then applies) between p1's list and its delete.
// The object keeps its UID, so only the ResourceVersion precondition
// catches it; the delete lists again and finds nothing of p1's.
func TestDeleteLeavesAnObjectChangedSinceListed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	admin := dynamic.NewForConfigOrDie(cluster.Config).Resource(reconcile.PolicyResource).Namespace(e.ns)
	if _, err := admin.Create(ctx, policyObject(e.ns, "allow-api", "p1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var takenOver atomic.Bool
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodDelete && takenOver.CompareAndSwap(false, true) {
				o, err := admin.Get(r.Context(), "allow-api", metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				o.SetLabels(map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.PolicyLabel: "p2"})
				if _, err := admin.Update(r.Context(), o, metav1.UpdateOptions{}); err != nil {
					return nil, err
				}
			}
			return next.RoundTrip(r)
		})
	})
	policies := reconcile.NewPolicies(dynamic.NewForConfigOrDie(cfg), reconcile.NewNamespaces(e.client, naming.Reserved{}))
	if err := policies.Delete(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if !takenOver.Load() {
		t.Fatal("the delete was never sent; the test proves nothing")
	}
	got, err := admin.Get(ctx, "allow-api", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("p2's object was deleted by p1's stale delete: %v", err)
	}
	if got.GetLabels()[kube.PolicyLabel] != "p2" {
		t.Fatalf("labels %v", got.GetLabels())
	}
}

// A policy applied in another namespace leaves nothing in the old one,
// and, its name being part of its identity too, a rename leaves nothing
// under the old name (see move_test.go). After the tests that need the
// CRD missing.
func TestPolicyMovedOrRenamedLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	nsA, nsB := e.ns, ownedNamespace(t, cluster)
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}})
	exists := func(ns, name string) bool { t.Helper(); return policyExists(t, dyn, ns, name) }
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "mover", Namespace: nsA, Name: "allow", Spec: spec}
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}

	state.Namespace = nsB
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if exists(nsA, "allow") || !exists(nsB, "allow") {
		t.Fatalf("after the move: in %s %v (want false), in %s %v (want true)", nsA, exists(nsA, "allow"), nsB, exists(nsB, "allow"))
	}

	state.Name = "allow-renamed"
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if exists(nsB, "allow") || !exists(nsB, "allow-renamed") {
		t.Fatalf("after the rename: old name %v (want false), new name %v (want true)", exists(nsB, "allow"), exists(nsB, "allow-renamed"))
	}
	if err := policies.Delete(ctx, "mover"); err != nil {
		t.Fatal(err)
	}
	if exists(nsB, "allow-renamed") {
		t.Fatal("the delete left the policy")
	}
}

// A policy moving to where its apply fails (here an unmanaged namesake
// is in the way) keeps its old object: Cilium allows what no policy
// selects, so the old one goes only once the new one is in place.
func TestPolicyMoveKeepsTheOldPolicyUntilTheNewOneIsApplied(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	nsA, nsB := e.ns, ownedNamespace(t, cluster)
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}})
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "guarded", Namespace: nsA, Name: "deny", Spec: spec}
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	blocker := policyObject(nsB, "deny", "")
	blocker.SetLabels(nil)
	if _, err := dyn.Resource(reconcile.PolicyResource).Namespace(nsB).Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	state.Namespace = nsB
	if err := policies.Apply(ctx, state); !errors.Is(err, kube.ErrConflict) {
		t.Fatalf("apply over an unmanaged namesake: got %v, want ErrConflict", err)
	}
	if !policyExists(t, dyn, nsA, "deny") {
		t.Fatal("the old policy was removed although the new one could not be applied")
	}
	if err := dyn.Resource(reconcile.PolicyResource).Namespace(nsB).Delete(ctx, "deny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := policies.Apply(ctx, state); err != nil {
		t.Fatal(err)
	}
	if policyExists(t, dyn, nsA, "deny") || !policyExists(t, dyn, nsB, "deny") {
		t.Fatalf("after the move: in %s %v (want false), in %s %v (want true)", nsA, policyExists(t, dyn, nsA, "deny"), nsB, policyExists(t, dyn, nsB, "deny"))
	}
}

// A policy's apply lists the policy's objects across the cluster only
// when it may have moved: the first time a controller applies it (an
// agent that just started knows nothing, and still removes what was left
// behind while it was away) and when it moves, not on a resync.
func TestPolicyApplyListsOnlyWhenThePolicyMayHaveMoved(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	nsA, nsB := e.ns, ownedNamespace(t, cluster)
	var lists atomic.Int32
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && r.URL.Path == "/apis/cilium.io/v2/ciliumnetworkpolicies" {
				lists.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	dyn := dynamic.NewForConfigOrDie(cfg)
	policies := reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}})
	state := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "listed", Namespace: nsA, Name: "allow", Spec: spec}
	applyListing := func(what string, want int32) {
		t.Helper()
		before := lists.Load()
		if err := policies.Apply(ctx, state); err != nil {
			t.Fatal(err)
		}
		if n := lists.Load() - before; n != want {
			t.Fatalf("%s: %d cluster-wide lists, want %d", what, n, want)
		}
	}
	applyListing("first apply", 1)
	applyListing("unchanged apply", 0)
	applyListing("unchanged apply", 0)
	state.Namespace = nsB
	applyListing("move", 1)
	if policyExists(t, dyn, nsA, "allow") {
		t.Fatal("the move left the policy behind")
	}
	applyListing("unchanged apply after the move", 0)

	// An agent starting anew, the policy moved back while it was away.
	policies = reconcile.NewPolicies(dyn, reconcile.NewNamespaces(e.client, naming.Reserved{}))
	state.Namespace = nsA
	applyListing("first apply of a new controller", 1)
	if policyExists(t, dyn, nsB, "allow") || !policyExists(t, dyn, nsA, "allow") {
		t.Fatal("a new controller's first apply left the policy behind")
	}
}

func policyExists(t *testing.T, dyn dynamic.Interface, ns, name string) bool {
	t.Helper()
	_, err := dyn.Resource(reconcile.PolicyResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func policyObject(ns, name, id string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNetworkPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns,
			"labels": map[string]any{kube.ManagedByLabel: kube.ManagedByValue, kube.PolicyLabel: id}},
		"spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "old"}}},
	}}
}

// A policy moved from a to b whose clean-up failed (b written, the list
// that finds a's object refused), then moved back to a, leaves nothing at
// b: the apply that failed half-way left no memory of a place, so the next
// one lists again and removes what the failed move wrote.
func TestAPolicyMovedBackAfterAFailedCleanUpLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cluster := shared.Get(t)
	cluster.InstallCiliumCRD(t)
	var failList atomic.Bool
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			// The cluster-wide list of the policy's objects fails (a 500, a
			// timeout): the new object is written, the old one not removed.
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/apis/cilium.io/v2/ciliumnetworkpolicies") && failList.Load() {
				return &http.Response{StatusCode: 500, Header: http.Header{"Content-Type": {"application/json"}}, Request: r,
					Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,"reason":"InternalError","message":"injected"}`))}, nil
			}
			return rt.RoundTrip(r)
		})
	})
	policies := reconcile.NewPolicies(dynamic.NewForConfigOrDie(cfg), reconcile.NewNamespaces(e.client, naming.Reserved{}))
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}})
	at := func(name string) *ctrlv1.CiliumNetworkPolicyState {
		return &ctrlv1.CiliumNetworkPolicyState{PolicyId: "p", Namespace: e.ns, Name: name, Spec: spec}
	}
	if err := policies.Apply(ctx, at("a")); err != nil {
		t.Fatal(err)
	}
	failList.Store(true)
	if err := policies.Apply(ctx, at("b")); err == nil {
		t.Fatal("the move's clean-up was meant to fail")
	}
	failList.Store(false)
	// The policy goes back (its latest intent supersedes the failing one),
	// and a full sync applies it again.
	for range 2 {
		if err := policies.Apply(ctx, at("a")); err != nil {
			t.Fatal(err)
		}
	}
	admin := dynamic.NewForConfigOrDie(cluster.Config).Resource(reconcile.PolicyResource).Namespace(e.ns)
	if _, err := admin.Get(ctx, "b", metav1.GetOptions{}); err == nil {
		t.Fatal("policy p's object at b is left behind: applies at a never look for it again")
	}
}
