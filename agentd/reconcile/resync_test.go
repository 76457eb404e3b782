package reconcile_test

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
)

// restarted is e's agent started again: a new cache (which remembers no
// match yet) and controllers, on the same namespace.
func (e *env) restarted(t *testing.T) *env {
	t.Helper()
	counter := &kubetest.WriteCounter{}
	client := kubernetes.NewForConfigOrDie(counter.Wrap(shared.Get(t).Config))
	cache := reconcile.NewCache(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &env{client: client, admin: e.admin, cache: cache, counter: counter, ns: e.ns,
		deps: reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client, naming.Reserved{}))}
}

// An agent's first resync after it starts, which compares every object
// (no match is remembered yet), writes exactly the objects someone changed
// while it was away, and puts them back; the rest cost no write. The
// changes are those a field-set or annotation check alone could miss too:
// a value changed and the agent's managed fields written back over it,
// and a field another manager force-applied.
func TestAFreshAgentPutsBackWhatChangedAndWritesNothingElse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sets, svcs := e.admin.AppsV1().StatefulSets(e.ns), e.admin.CoreV1().Services(e.ns)
	by := metav1.UpdateOptions{FieldManager: "intruder"}
	edit := func(name string, change func(*appsv1.StatefulSet)) {
		t.Helper()
		s, err := sets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(s)
		if _, err := sets.Update(ctx, s, by); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		change func()
		writes int64
	}{
		{name: "untouched", change: func() {}},
		{name: "scaled", writes: 1, change: func() {
			edit("scaled", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr(int32(1)) })
		}},
		{name: "scaled-by-subresource", writes: 1, change: func() {
			scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "scaled-by-subresource", Namespace: e.ns},
				Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
			if _, err := sets.UpdateScale(ctx, "scaled-by-subresource", scale, by); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "scaled-and-forged", writes: 1, change: func() {
			s, err := sets.Get(ctx, "scaled-and-forged", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			agents := s.ManagedFields
			edit("scaled-and-forged", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr(int32(1)) })
			edit("scaled-and-forged", func(s *appsv1.StatefulSet) { s.ManagedFields = agents })
		}},
		{name: "unlabelled", writes: 1, change: func() {
			edit("unlabelled", func(s *appsv1.StatefulSet) { delete(s.Labels, kube.DeploymentLabel) })
		}},
		{name: "rehashed", writes: 1, change: func() {
			edit("rehashed", func(s *appsv1.StatefulSet) { s.Annotations[kube.HashAnnotation] = "0000000000000000" })
		}},
		{name: "env-edited", writes: 1, change: func() {
			edit("env-edited", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Env[0].Value = "edited" })
		}},
		{name: "reimaged", writes: 1, change: func() {
			theirs := appsv1ac.StatefulSet("reimaged", e.ns).WithSpec(appsv1ac.StatefulSetSpec().WithTemplate(
				corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("evil:1")))))
			if _, err := sets.Apply(ctx, theirs, metav1.ApplyOptions{FieldManager: "intruder", Force: true}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "service-retargeted", writes: 1, change: func() {
			s, err := svcs.Get(ctx, "service-retargeted", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(9090)
			if _, err := svcs.Update(ctx, s, by); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := e.deps.Apply(ctx, e.state(c.name, 2)); err != nil {
				t.Fatal(err)
			}
			wantSts, err := sets.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantSvc, err := svcs.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.change()

			fresh := e.restarted(t)
			if err := fresh.deps.Apply(ctx, e.state(c.name, 2)); err != nil {
				t.Fatal(err)
			}
			if n := fresh.counter.Writes(); n != c.writes {
				t.Errorf("the first resync wrote %d times, want %d", n, c.writes)
			}
			gotSts, err := sets.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gotSvc, err := svcs.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if *gotSts.Spec.Replicas != 2 || !reflect.DeepEqual(gotSts.Spec.Template, wantSts.Spec.Template) ||
				gotSts.Labels[kube.DeploymentLabel] != c.name || gotSts.Annotations[kube.HashAnnotation] != wantSts.Annotations[kube.HashAnnotation] {
				t.Errorf("StatefulSet not put back: %d replicas, labels %v, annotations %v, template %+v",
					*gotSts.Spec.Replicas, gotSts.Labels, gotSts.Annotations, gotSts.Spec.Template)
			}
			if !reflect.DeepEqual(gotSvc.Spec.Ports, wantSvc.Spec.Ports) {
				t.Errorf("Service not put back: ports %+v", gotSvc.Spec.Ports)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
