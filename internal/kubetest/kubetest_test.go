package kubetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/kubetest"
)

const fieldManager = "kubetest-proof"

var labels = map[string]string{"unkey.managed.by": "krane", "unkey.deployment.id": "d1"}

// The real API server decides server-side apply, label selection, watches
// and deletes; this proves the helper gives tests exactly that.
func TestAPIServerAppliesListsWatchesAndDeletes(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{})
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()

	applyService(t, client, ns)
	applyStatefulSet(t, client, ns, 1)

	selector := metav1.ListOptions{LabelSelector: "unkey.managed.by=krane,unkey.deployment.id=d1"}
	services, err := client.CoreV1().Services(ns).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(services.Items) != 1 || services.Items[0].Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("want one headless service, got %+v", services.Items)
	}
	sets, err := client.AppsV1().StatefulSets(ns).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets.Items) != 1 {
		t.Fatalf("want one statefulset by label, got %d", len(sets.Items))
	}
	if mf := sets.Items[0].ManagedFields; len(mf) == 0 || mf[0].Manager != fieldManager || mf[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("statefulset not owned by apply manager %q: %+v", fieldManager, mf)
	}
	other, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "unkey.deployment.id=other"})
	if err != nil || len(other.Items) != 0 {
		t.Fatalf("selector for another deployment matched %d (err %v)", len(other.Items), err)
	}

	w, err := client.AppsV1().StatefulSets(ns).Watch(ctx, metav1.ListOptions{
		LabelSelector:   selector.LabelSelector,
		ResourceVersion: sets.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	applyStatefulSet(t, client, ns, 2)
	ev := nextEvent(t, w)
	if ev.Type != watch.Modified || *ev.Object.(*appsv1.StatefulSet).Spec.Replicas != 2 {
		t.Fatalf("want MODIFIED with 2 replicas, got %s %+v", ev.Type, ev.Object)
	}

	if err := client.AppsV1().StatefulSets(ns).Delete(ctx, "d1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, w); ev.Type != watch.Deleted {
		t.Fatalf("want DELETED, got %s", ev.Type)
	}
	if err := client.CoreV1().Services(ns).Delete(ctx, "d1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Get(ctx, "d1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("service still there after delete: %v", err)
	}
}

// With the controller manager, the scheduler and kwok, a StatefulSet's Pods
// are created, scheduled on the fake node and become Running and Ready, and
// stay Ready past the node monitor's grace period (kwok keeps the node's
// heartbeat going, as a kubelet would).
func TestWorkloadsReachRunningAndStayReady(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{Workloads: true})
	client := cluster.Client(t)
	ns := cluster.Namespace(t)

	applyService(t, client, ns)
	applyStatefulSet(t, client, ns, 3)

	deadline := time.Now().Add(60 * time.Second)
	for {
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "unkey.deployment.id=d1"})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == kubetest.FakeNodeName {
				running++
			}
		}
		if running == 3 && readyPods(pods.Items) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 pods Running after 60s: %+v", running, pods.Items)
		}
		time.Sleep(200 * time.Millisecond)
	}

	time.Sleep(kubetest.NodeMonitorGrace + 10*time.Second)
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "unkey.deployment.id=d1"})
	if err != nil {
		t.Fatal(err)
	}
	if ready := readyPods(pods.Items); ready != 3 {
		t.Fatalf("%d of 3 pods still Ready %s after they became Ready: the fake node lost its heartbeat", ready, kubetest.NodeMonitorGrace+10*time.Second)
	}
}

func readyPods(pods []corev1.Pod) int {
	ready := 0
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready
}

func applyService(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	svc := corev1ac.Service("d1", ns).
		WithLabels(labels).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(map[string]string{"unkey.deployment.id": "d1"}).
			WithPorts(corev1ac.ServicePort().WithName("http").WithPort(8080)))
	if _, err := client.CoreV1().Services(ns).Apply(context.Background(), svc, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		t.Fatalf("apply service: %v", err)
	}
}

func applyStatefulSet(t *testing.T, client kubernetes.Interface, ns string, replicas int32) {
	t.Helper()
	sts := appsv1ac.StatefulSet("d1", ns).
		WithLabels(labels).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(replicas).
			WithServiceName("d1").
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"unkey.deployment.id": "d1"})).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().
					WithContainers(corev1ac.Container().WithName("app").WithImage("nginx:1.27")))))
	if _, err := client.AppsV1().StatefulSets(ns).Apply(context.Background(), sts, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		t.Fatalf("apply statefulset: %v", err)
	}
}

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watch.Event{}
}

// A restarted API server serves the same objects at the same address: etcd
// keeps them.
func TestRestartAPIServerKeepsObjects(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{})
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	applyService(t, client, ns)
	if err := cluster.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Get(ctx, "d1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the service after the restart: %v", err)
	}

	// A restart that comes after Stop (a fault still under way when its
	// test ended) starts nothing and says so.
	cluster.Stop()
	if err := cluster.RestartAPIServer(ctx); !errors.Is(err, kubetest.ErrStopped) {
		t.Fatalf("restart after Stop: %v, want ErrStopped", err)
	}
}
