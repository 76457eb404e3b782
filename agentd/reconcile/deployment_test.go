package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

var shared kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &shared)) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// env is a controller set on the shared cluster with counted writes.
type env struct {
	client  kubernetes.Interface
	admin   kubernetes.Interface
	cache   *reconcile.Cache
	deps    *reconcile.Deployments
	counter *kubetest.WriteCounter
	ns      string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWrapped(t, nil)
}

// newEnvWrapped is newEnv with the controllers' requests passing through
// wrap, if set, before they are counted.
func newEnvWrapped(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) *env {
	t.Helper()
	cluster := shared.Get(t)
	counter := &kubetest.WriteCounter{}
	cfg := counter.Wrap(cluster.Config)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	cache := reconcile.NewCache(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &env{
		client: client, admin: cluster.Client(t), cache: cache, counter: counter, ns: ownedNamespace(t, cluster),
		deps: reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client, naming.Reserved{})),
	}
}

// ownedNamespace is a test namespace the agent may write into: labeled as
// its own (see reconcile.Namespaces).
func ownedNamespace(t testing.TB, c *kubetest.Cluster) string {
	t.Helper()
	return c.NamespaceLabeled(t, map[string]string{kube.ManagedByLabel: kube.ManagedByValue})
}

func (e *env) state(id string, replicas int32) *ctrlv1.DeploymentState {
	return &ctrlv1.DeploymentState{DeploymentId: id, Namespace: e.ns, Image: "ghcr.io/acme/api:v1", Replicas: replicas,
		CpuMillicores: 250, MemoryMib: 256, Port: 8080, Command: []string{"/api"}, Env: map[string]string{"B": "2", "A": "1"}}
}

// waitCached waits until the informer cache holds a workload's objects
// named name in ns: its Service, and its workload object (a deployment's
// StatefulSet, a sentinel's Deployment) with the given replicas, so the
// next apply sees what the last one wrote.
func (e *env) waitCached(t *testing.T, workload cachedReplicas, ns, name string, replicas int32) {
	t.Helper()
	eventually.True(t, 5*time.Second, fmt.Sprintf("cache never showed %s/%s with %d replicas", ns, name, replicas), func() bool {
		n, err := workload(e.cache, ns, name)
		if err != nil || n != replicas {
			return false
		}
		_, err = e.cache.Services.Services(ns).Get(name)
		return err == nil
	})
}

// cachedReplicas reads a workload object's replicas from the cache.
type cachedReplicas func(c *reconcile.Cache, ns, name string) (int32, error)

func cachedStatefulSet(c *reconcile.Cache, ns, name string) (int32, error) {
	s, err := c.StatefulSets.StatefulSets(ns).Get(name)
	if err != nil {
		return 0, err
	}
	return *s.Spec.Replicas, nil
}

func cachedDeployment(c *reconcile.Cache, ns, name string) (int32, error) {
	d, err := c.Deployments.Deployments(ns).Get(name)
	if err != nil {
		return 0, err
	}
	return *d.Spec.Replicas, nil
}

func TestDeploymentApplyCreatesServiceAndStatefulSet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 3)); err != nil {
		t.Fatal(err)
	}
	svc, err := e.admin.CoreV1().Services(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.PublishNotReadyAddresses != true ||
		svc.Spec.Selector[kube.DeploymentLabel] != "api" || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("service spec: %+v", svc.Spec)
	}
	sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if *sts.Spec.Replicas != 3 || c.Image != "ghcr.io/acme/api:v1" || c.Command[0] != "/api" ||
		c.Env[0].Name != "A" || sts.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("statefulset spec: %+v", sts.Spec)
	}
	if c.Resources.Requests.Cpu().MilliValue() != 250 || c.Resources.Limits.Memory().Value() != 256<<20 ||
		!c.Resources.Requests.Cpu().Equal(*c.Resources.Limits.Cpu()) {
		t.Errorf("resources: requests must equal limits: %+v", c.Resources)
	}
	for _, labels := range []map[string]string{svc.Labels, sts.Labels, sts.Spec.Template.Labels} {
		if labels[kube.ManagedByLabel] != "krane" || labels[kube.DeploymentLabel] != "api" {
			t.Errorf("labels %v", labels)
		}
	}
	for _, mf := range [][]metav1.ManagedFieldsEntry{svc.ManagedFields, sts.ManagedFields} {
		if mf[0].Manager != kube.FieldManager || mf[0].Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("not applied by field manager %q: %+v", kube.FieldManager, mf)
		}
	}
}

// Re-applying unchanged state makes no API writes; a change does; an
// out-of-band edit is put back.
func TestDeploymentNoOpApplyWritesNothingAndDriftIsRepaired(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 2)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 2)
	before := e.counter.Writes()
	for range 5 {
		if err := e.deps.Apply(ctx, e.state("api", 2)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Fatalf("no-op applies made %d writes", n)
	}

	if err := e.deps.Apply(ctx, e.state("api", 4)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 4)
	if n := e.counter.Writes() - before; n == 0 {
		t.Fatal("a replica change made no write")
	}

	// Someone scales it by hand (an Update by another manager).
	sts, _ := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	one := int32(1)
	sts.Spec.Replicas = &one
	if _, err := e.admin.AppsV1().StatefulSets(e.ns).Update(ctx, sts, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 1)
	if err := e.deps.Apply(ctx, e.state("api", 4)); err != nil {
		t.Fatal(err)
	}
	got, _ := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if *got.Spec.Replicas != 4 {
		t.Fatalf("drift not repaired: %d replicas", *got.Spec.Replicas)
	}
}

// A state whose environment holds an empty value (the API server stores
// it without the value) is still a no-op to apply again, the container
// gets the variable, empty, and a value someone sets by hand is put back.
func TestAnEmptyEnvValueIsANoOpToApplyAgainAndKeptEmpty(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.state("api", 1)
	s.Env["EMPTY"] = ""
	if err := e.deps.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 1)
	before := e.counter.Writes()
	for range 3 {
		if err := e.deps.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Errorf("applying the same state again made %d writes", n)
	}
	sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := sts.Spec.Template.Spec.Containers[0].Env
	if !slices.ContainsFunc(env, func(v corev1.EnvVar) bool { return v.Name == "EMPTY" && v.Value == "" && v.ValueFrom == nil }) {
		t.Errorf("container env %+v, want EMPTY set to the empty string", env)
	}

	// Someone sets it by hand (an Update by another manager): the next
	// applies put the empty value back, like any other drift.
	sts, err = e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &sts.Spec.Template.Spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == "EMPTY" {
			c.Env[i].Value = "oops"
		}
	}
	edited, err := e.admin.AppsV1().StatefulSets(e.ns).Update(ctx, sts, metav1.UpdateOptions{FieldManager: "kubectl-set"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 15*time.Second, "the cache never saw the edited StatefulSet", func() bool {
		got, err := e.cache.StatefulSets.StatefulSets(e.ns).Get("api")
		return err == nil && got.ResourceVersion == edited.ResourceVersion
	})
	for range 2 { // the drift handler's re-apply, and a resync
		if err := e.deps.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	for _, v := range got.Spec.Template.Spec.Containers[0].Env {
		if v.Name == "EMPTY" && v.Value != "" {
			t.Fatalf("desired EMPTY=\"\", live EMPTY=%q after re-applies: drift never repaired", v.Value)
		}
	}
}

func TestDeploymentDeleteRemovesOnlyManagedObjects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 1)
	// A namesake-labeled but unmanaged Service must survive.
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: e.ns,
		Labels: map[string]string{kube.DeploymentLabel: "api"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := e.admin.CoreV1().Services(e.ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.deps.Delete(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("statefulset still there: %v", err)
	}
	if _, err := e.admin.CoreV1().Services(e.ns).Get(ctx, "api", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("service still there: %v", err)
	}
	if _, err := e.admin.CoreV1().Services(e.ns).Get(ctx, "foreign", metav1.GetOptions{}); err != nil {
		t.Errorf("unmanaged service was deleted: %v", err)
	}
}

// A delete right after an apply (deploy, then stop at once) removes what
// the apply created, though the informer cache has not seen it yet.
func TestDeleteRightAfterApplyLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The controllers read a cache stopped before the applies, so it never
	// sees what they create: a cache that has not caught up yet, without
	// racing the informers.
	lagging := reconcile.NewCache(e.client, 0)
	stopped, stop := context.WithCancel(ctx)
	if err := lagging.Start(stopped); err != nil {
		t.Fatal(err)
	}
	stop()
	namespaces := reconcile.NewNamespaces(e.client, naming.Reserved{})
	deps := reconcile.NewDeployments(e.client, lagging, namespaces)
	sentinels := reconcile.NewSentinels(e.client, lagging, namespaces)

	if err := deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	if err := deps.Delete(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	gw := &ctrlv1.SentinelState{SentinelId: "gw", Namespace: e.ns, Image: "sentinel:1", Replicas: 1, CpuMillicores: 100, MemoryMib: 64}
	if err := sentinels.Apply(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if err := sentinels.Delete(ctx, "gw"); err != nil {
		t.Fatal(err)
	}

	gone := func(kind string, err error) {
		t.Helper()
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s still there after the delete: %v", kind, err)
		}
	}
	_, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	gone("deployment's StatefulSet", err)
	_, err = e.admin.CoreV1().Services(e.ns).Get(ctx, "api", metav1.GetOptions{})
	gone("deployment's Service", err)
	_, err = e.admin.AppsV1().Deployments(e.ns).Get(ctx, naming.Sentinel("gw"), metav1.GetOptions{})
	gone("sentinel's Deployment", err)
	_, err = e.admin.CoreV1().Services(e.ns).Get(ctx, naming.Sentinel("gw"), metav1.GetOptions{})
	gone("sentinel's Service", err)
}

// A namespace deleted out of band is created again by the next apply (a
// retry at most), not remembered as present for the rest of the term.
func TestApplyRecreatesADeletedNamespace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 1)

	// Delete the namespace as the namespace controller (not running in
	// this control plane) would: its content, then its finalizer, then it.
	if err := e.deps.Delete(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := e.admin.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := e.admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually.True(t, 15*time.Second, "the namespace and its StatefulSet never left the API server and the cache", func() bool {
		_, err := e.admin.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
		_, cached := e.cache.StatefulSets.StatefulSets(e.ns).Get("api")
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(cached)
	})

	// The first apply may find the namespace gone; the retry must not.
	err = e.deps.Apply(ctx, e.state("api", 1))
	if err != nil {
		err = e.deps.Apply(ctx, e.state("api", 1))
	}
	if err != nil {
		t.Fatalf("apply after the namespace was deleted: %v", err)
	}
	if _, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{}); err != nil {
		t.Fatalf("statefulset not re-created: %v", err)
	}
}

// An existing object without the managed-by label is a conflict, never
// taken over.
func TestUnlabeledObjectIsAConflict(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	theirs := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: e.ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "theirs:1"}}},
			},
		}}
	if _, err := e.admin.AppsV1().StatefulSets(e.ns).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := e.deps.Apply(ctx, e.state("api", 1))
	if !errors.Is(err, kube.ErrConflict) {
		t.Fatalf("got %v, want a conflict", err)
	}
	got, _ := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
	if got.Spec.Template.Spec.Containers[0].Image != "theirs:1" || kube.Managed(got.Labels) {
		t.Fatal("the unlabeled statefulset was modified")
	}
}

// A namespace someone else creates between the agent's read and its create
// stays theirs: the agent's create is refused, not turned into a take-over
// of an object without the managed-by label, and the namespace is refused
// as someone else's (kube.ErrForeignNamespace): nothing is written into it.
func TestEnsureLeavesANamespaceCreatedMeanwhileAlone(t *testing.T) {
	cluster := shared.Get(t)
	ctx := context.Background()
	admin := cluster.Client(t)
	ns := "theirs-" + strings.ToLower(strings.ReplaceAll(t.Name()[len(t.Name())-6:], "_", "x"))
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns) && resp.StatusCode == 404 {
				// Someone creates it right after the agent's read.
				if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
					Labels: map[string]string{"owner": "someone-else"}}}, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}
			return resp, err
		})
	})
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if err := reconcile.NewNamespaces(kubernetes.NewForConfigOrDie(cfg), naming.Reserved{}).Ensure(ctx, ns); !errors.Is(err, kube.ErrForeignNamespace) {
		t.Errorf("ensure of a namespace someone else created meanwhile: got %v, want it refused as someone else's", err)
	}
	got, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["unkey.managed.by"] == "krane" {
		t.Fatalf("someone else's namespace was taken over: labels %v", got.Labels)
	}
}
