package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/naming"
)

// requests counts the requests through the round trippers it wraps.
type requests struct{ reads, writes atomic.Int64 }

func (r *requests) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet {
			r.reads.Add(1)
		} else {
			r.writes.Add(1)
		}
		return next.RoundTrip(req)
	})
}

// A new deployment costs one write per object and no read: the cache,
// which holds every managed object, says it is not there, and the create
// itself fails if anything else is.
func TestCreateCostsOneWritePerObjectAndNoRead(t *testing.T) {
	var counted requests
	e := newEnvWrapped(t, counted.wrap)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("first", 1)); err != nil { // ensures the namespace
		t.Fatal(err)
	}
	reads, writes := counted.reads.Load(), counted.writes.Load()
	if err := e.deps.Apply(ctx, e.state("api", 2)); err != nil {
		t.Fatal(err)
	}
	if r, w := counted.reads.Load()-reads, counted.writes.Load()-writes; r != 0 || w != 2 {
		t.Errorf("a new deployment took %d reads and %d writes, want 0 and 2", r, w)
	}
	sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 2 || !kube.Managed(sts.Labels) {
		t.Errorf("created %v replicas, labels %v", *sts.Spec.Replicas, sts.Labels)
	}
	// Created as an apply would: the field manager's Apply entry, so the
	// next resync of the same state finds it up to date.
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 2)
	before := e.counter.Writes()
	if err := e.deps.Apply(ctx, e.state("api", 2)); err != nil {
		t.Fatal(err)
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Errorf("resync after a create wrote %d times, want 0", n)
	}
}

// An object without the managed-by label that takes the name after the
// cache last looked, the instant before the agent writes, is not taken
// over: the create fails, the agent reads the object, and the apply is a
// conflict, as it is for one that was there all along
// (TestUnlabeledObjectIsAConflict).
func TestCreateIsNoTakeOverEvenInARace(t *testing.T) {
	for _, kind := range []string{"services", "statefulsets"} {
		t.Run(kind, func(t *testing.T) {
			var (
				admin kubernetes.Interface
				ns    string
				once  sync.Once
			)
			// theirs creates their object just before the agent's first
			// write of kind.
			theirs := func(next http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/"+kind+"/") {
						once.Do(func() { createTheirs(t, admin, kind, ns) })
					}
					return next.RoundTrip(req)
				})
			}
			e := newEnvWrapped(t, theirs)
			admin, ns = e.admin, e.ns
			err := e.deps.Apply(context.Background(), e.state("api", 1))
			if !errors.Is(err, kube.ErrConflict) {
				t.Fatalf("got %v, want a conflict", err)
			}
			assertTheirs(t, e.admin, kind, ns)
		})
	}
}

// An apply that finds its own object not yet in the cache (created by an
// apply the informer has not delivered, here by a controller whose cache
// never started) updates it: the failed create reads the object, sees the
// managed-by label and applies.
func TestApplyOverAManagedObjectTheCacheHasNotSeen(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	var counted requests
	cfg := shared.Get(t).Config
	blind := wrappedClient(cfg, counted.wrap)
	deps := reconcile.NewDeployments(blind, reconcile.NewCache(blind, 0), reconcile.NewNamespaces(blind, naming.Reserved{}))
	if err := deps.Apply(ctx, e.state("api", 4)); err != nil {
		t.Fatal(err)
	}
	sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 4 {
		t.Errorf("replicas %d, want 4", *sts.Spec.Replicas)
	}
	// Per object: the failed create, the read, the apply (and the
	// namespace's read once).
	if r, w := counted.reads.Load(), counted.writes.Load(); r != 3 || w != 4 {
		t.Errorf("%d reads and %d writes, want 3 and 4", r, w)
	}
}

// An object found to be the agent's, and then deleted and replaced by
// someone else's before the agent's apply, is not taken over: the apply
// carries the UID it found as a precondition, and fails.
func TestAnObjectSwappedAfterItWasReadIsNotTakenOver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	// A controller whose cache never started: its create of the
	// StatefulSet is refused (ours holds the name), it reads ours, and
	// right after that read ours is swapped for theirs.
	var once sync.Once
	swap := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/statefulsets/api") {
				once.Do(func() {
					if err := e.admin.AppsV1().StatefulSets(e.ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
						t.Errorf("delete ours: %v", err)
					}
					createTheirs(t, e.admin, "statefulsets", e.ns)
				})
			}
			return resp, err
		})
	}
	blind := wrappedClient(shared.Get(t).Config, swap)
	deps := reconcile.NewDeployments(blind, reconcile.NewCache(blind, 0), reconcile.NewNamespaces(blind, naming.Reserved{}))
	if err := deps.Apply(ctx, e.state("api", 4)); err == nil {
		t.Error("the apply onto an object swapped since it was read succeeded; want it refused")
	}
	assertTheirs(t, e.admin, "statefulsets", e.ns)
}

// createTheirs creates an object of kind named like the agent's, without
// the managed-by label, and in every immutable field like the agent's:
// an apply would take it over rather than fail validation.
func createTheirs(t *testing.T, admin kubernetes.Interface, kind, ns string) {
	ctx := context.Background()
	selector := map[string]string{kube.DeploymentLabel: "api"}
	var err error
	switch kind {
	case "services":
		_, err = admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns,
			Labels: map[string]string{"app": "theirs"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "theirs", Port: 9999}}}}, metav1.CreateOptions{})
	case "statefulsets":
		_, err = admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns,
			Labels: map[string]string{"app": "theirs"}},
			Spec: appsv1.StatefulSetSpec{
				ServiceName:         "api",
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: selector},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: selector},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "theirs:1"}}},
				},
			}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Errorf("create their %s: %v", kind, err)
	}
}

// assertTheirs fails unless their object of kind is as createTheirs made
// it.
func assertTheirs(t *testing.T, admin kubernetes.Interface, kind, ns string) {
	t.Helper()
	ctx := context.Background()
	var labels map[string]string
	switch kind {
	case "services":
		svc, err := admin.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9999 {
			t.Errorf("their service's ports were changed: %v", svc.Spec.Ports)
		}
		labels = svc.Labels
	case "statefulsets":
		sts, err := admin.AppsV1().StatefulSets(ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != "theirs:1" {
			t.Errorf("their statefulset's image was changed to %s", img)
		}
		labels = sts.Labels
	}
	if len(labels) != 1 || labels["app"] != "theirs" {
		t.Errorf("their %s was relabelled: %v", kind, labels)
	}
}

// wrappedClient is a client on cfg with its requests through wrap.
func wrappedClient(cfg *restclient.Config, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	c := restclient.CopyConfig(cfg)
	c.Wrap(wrap)
	return kubernetes.NewForConfigOrDie(c)
}
