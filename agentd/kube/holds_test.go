package kube_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/kubetest"
)

var shared kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &shared)) }

// statefulSet is a desired StatefulSet with every kind of field the
// agent's own have: labels, an annotation, scalars, an atomic selector, a
// list of containers keyed by name, ports keyed by port and a defaulted
// protocol, an atomic command, env keyed by name, quantities.
func statefulSet(name, ns, image string, env ...string) *appsv1ac.StatefulSetApplyConfiguration {
	labels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: name}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(250, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(256<<20, resource.BinarySI),
	}
	c := corev1ac.Container().WithName("app").WithImage(image).WithCommand("/api", "--serve").
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(8080)).
		WithResources(corev1ac.ResourceRequirements().WithRequests(res).WithLimits(res))
	for i := 0; i+1 < len(env); i += 2 {
		c.WithEnv(corev1ac.EnvVar().WithName(env[i]).WithValue(env[i+1]))
	}
	return appsv1ac.StatefulSet(name, ns).WithLabels(labels).
		WithAnnotations(map[string]string{kube.HashAnnotation: "h1"}).
		WithSpec(appsv1ac.StatefulSetSpec().WithReplicas(3).WithServiceName(name).
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{kube.DeploymentLabel: name})).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithRestartPolicy(corev1.RestartPolicyAlways).WithContainers(c))))
}

func service(name, ns string) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(name, ns).
		WithLabels(map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: name}).
		WithAnnotations(map[string]string{kube.HashAnnotation: "h1"}).
		WithSpec(corev1ac.ServiceSpec().WithClusterIP(corev1.ClusterIPNone).WithPublishNotReadyAddresses(true).
			WithSelector(map[string]string{kube.DeploymentLabel: name}).
			WithPorts(corev1ac.ServicePort().WithName("http").WithPort(8080).WithTargetPort(intstr.FromInt32(8080))))
}

var applied = metav1.ApplyOptions{FieldManager: kube.FieldManager, Force: true}

// extracted is the check Holds replaces: the configuration client-go's
// Extract… takes out of live for the field manager, compared with desired.
func extracted(t *testing.T, live any, desired any) bool {
	t.Helper()
	var owned any
	var err error
	switch o := live.(type) {
	case *appsv1.StatefulSet:
		owned, err = appsv1ac.ExtractStatefulSet(o, kube.FieldManager)
	case *corev1.Service:
		owned, err = corev1ac.ExtractService(o, kube.FieldManager)
	default:
		t.Fatalf("no Extract for %T", live)
	}
	if err != nil {
		t.Fatal(err)
	}
	return kube.Same(owned, desired)
}

// Holds says of a live object what comparing desired with the
// configuration Extract… takes out of it says, in every way the object
// can come to differ from what the agent applied, each made on a real
// API server: it finds the drift a resync must put back, and nothing
// else.
func TestHoldsSaysWhatExtractSays(t *testing.T) {
	cluster := shared.Get(t)
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	sets := client.AppsV1().StatefulSets(ns)
	intruder := metav1.UpdateOptions{FieldManager: "intruder"}

	for i, c := range []struct {
		name string
		// desired is what the agent applies first, and holds what it
		// wants now (the first, unless set).
		desired func(name string) *appsv1ac.StatefulSetApplyConfiguration
		now     func(name string) *appsv1ac.StatefulSetApplyConfiguration
		// change, if set, is what happens to the object after the apply.
		change func(t *testing.T, s *appsv1.StatefulSet)
		want   bool
	}{
		{name: "as applied", want: true},
		{name: "scaled by another manager", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Spec.Replicas = ptr(int32(1))
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "scaled through the scale subresource", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
			must[*autoscalingv1.Scale](t)(sets.UpdateScale(ctx, s.Name, scale, intruder))
		}},
		{name: "its ID label removed", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			delete(s.Labels, kube.DeploymentLabel)
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "its hash annotation edited", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Annotations[kube.HashAnnotation] = "h2"
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "an env value edited", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Env[0].Value = "edited"
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "the command edited", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Command = []string{"/sh"}
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "a memory limit edited", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{name: "the image force-applied by another manager", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			other := appsv1ac.StatefulSet(s.Name, ns).WithSpec(appsv1ac.StatefulSetSpec().WithTemplate(corev1ac.PodTemplateSpec().
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("evil:1")))))
			must[*appsv1.StatefulSet](t)(sets.Apply(ctx, other, metav1.ApplyOptions{FieldManager: "intruder", Force: true}))
		}},
		{name: "the same image applied by another manager too", want: true, change: func(t *testing.T, s *appsv1.StatefulSet) {
			other := appsv1ac.StatefulSet(s.Name, ns).WithSpec(appsv1ac.StatefulSetSpec().WithTemplate(corev1ac.PodTemplateSpec().
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("app:1")))))
			must[*appsv1.StatefulSet](t)(sets.Apply(ctx, other, metav1.ApplyOptions{FieldManager: "intruder"}))
		}},
		{name: "a label and a sidecar of another manager", want: true, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Labels["team"] = "x"
			s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "proxy:1"})
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{
			// A value changed, then the agent's field set written back
			// over the managed fields: the field set says the agent owns
			// the replicas it applied, the values say otherwise.
			name: "scaled, then the managed fields forged back", want: false,
			change: func(t *testing.T, s *appsv1.StatefulSet) {
				before := s.ManagedFields
				s.Spec.Replicas = ptr(int32(1))
				s = must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
				s.ManagedFields = before
				s = must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
				if len(s.ManagedFields) != 1 || s.ManagedFields[0].Manager != kube.FieldManager || *s.Spec.Replicas != 1 {
					t.Fatalf("the forgery did not take: replicas %d, managed fields %+v", *s.Spec.Replicas, s.ManagedFields)
				}
			},
		},
		{name: "the agent's managed fields entry dropped", want: false, change: func(t *testing.T, s *appsv1.StatefulSet) {
			s.Labels["team"] = "x"
			s = must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
			var kept []metav1.ManagedFieldsEntry
			for _, mf := range s.ManagedFields {
				if mf.Manager != kube.FieldManager {
					kept = append(kept, mf)
				}
			}
			s.ManagedFields = kept
			must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
		}},
		{
			name: "an env var the agent applied and no longer wants", want: false,
			desired: func(name string) *appsv1ac.StatefulSetApplyConfiguration {
				return statefulSet(name, ns, "app:1", "A", "1", "B", "2", "C", "3")
			},
		},
		{
			// As many fields as desired's, but not the same ones: the
			// replicas, at the wanted value, are another manager's.
			name: "a label the agent no longer wants, and the replicas another manager's", want: false,
			desired: func(name string) *appsv1ac.StatefulSetApplyConfiguration {
				return statefulSet(name, ns, "app:1", "A", "1", "B", "2").WithLabels(map[string]string{"old": "x"})
			},
			change: func(t *testing.T, s *appsv1.StatefulSet) {
				s.Spec.Replicas = ptr(int32(1))
				s = must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
				s.Spec.Replicas = ptr(int32(3))
				must[*appsv1.StatefulSet](t)(sets.Update(ctx, s, intruder))
			},
		},
		{
			name: "a new image wanted", want: false,
			now: func(name string) *appsv1ac.StatefulSetApplyConfiguration {
				return statefulSet(name, ns, "app:2", "A", "1", "B", "2")
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("s%d", i)
			now := statefulSet(name, ns, "app:1", "A", "1", "B", "2")
			first := now
			if c.desired != nil {
				first = c.desired(name)
			}
			if c.now != nil {
				now = c.now(name)
			}
			live := must[*appsv1.StatefulSet](t)(sets.Apply(ctx, first, applied))
			if c.change != nil {
				c.change(t, live)
			}
			live, err := sets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, oracle := kube.Holds(live, now), extracted(t, live, now)
			if got != c.want || oracle != c.want {
				t.Errorf("Holds = %v, Extract… says %v, want %v", got, oracle, c.want)
			}
		})
	}
}

// A Service as applied holds, one whose port another manager changed
// does not.
func TestHoldsAService(t *testing.T) {
	cluster := shared.Get(t)
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	svcs := client.CoreV1().Services(ns)
	live := must[*corev1.Service](t)(svcs.Apply(ctx, service("api", ns), applied))
	if !kube.Holds(live, service("api", ns)) || !extracted(t, live, service("api", ns)) {
		t.Errorf("the Service as applied does not hold")
	}
	live.Spec.Ports[0].TargetPort = intstr.FromInt32(9090)
	live = must[*corev1.Service](t)(svcs.Update(ctx, live, metav1.UpdateOptions{FieldManager: "intruder"}))
	if kube.Holds(live, service("api", ns)) || extracted(t, live, service("api", ns)) {
		t.Errorf("a Service whose target port another manager changed holds")
	}
}

// Holds never holds what it cannot read: a desired object of a kind
// without a schema, or a live object without the agent's entry.
func TestHoldsNothingItCannotRead(t *testing.T) {
	if kube.Holds(&appsv1.StatefulSet{}, struct{ Replicas int }{3}) {
		t.Error("Holds of a desired object that is not a configuration")
	}
	if kube.Holds(&appsv1.StatefulSet{}, statefulSet("a", "b", "app:1")) {
		t.Error("Holds of a live object without managed fields")
	}
}

// must passes on a call's result, failing t on its error.
func must[T any](t testing.TB) func(T, error) T {
	return func(o T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkHolds: what telling an unchanged StatefulSet up to date costs
// an agent whose memo of matches is empty (its first resync after it
// starts), with Holds and with the check it replaces (Extract… and a
// comparison), on the same object read from a real API server.
func BenchmarkHolds(b *testing.B) {
	cluster := shared.Get(b)
	client := cluster.Client(b)
	ns := cluster.Namespace(b)
	desired := statefulSet("bench", ns, "app:1", "A", "1", "B", "2")
	live, err := client.AppsV1().StatefulSets(ns).Apply(context.Background(), desired, applied)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("extract", func(b *testing.B) {
		for b.Loop() {
			owned, err := appsv1ac.ExtractStatefulSet(live, kube.FieldManager)
			if err != nil || !kube.Same(owned, desired) {
				b.Fatal("not up to date")
			}
		}
	})
	b.Run("holds", func(b *testing.B) {
		for b.Loop() {
			if !kube.Holds(live, desired) {
				b.Fatal("not up to date")
			}
		}
	})
}

// A map entry whose desired value is "" (an annotation here) that the live
// object lacks is not held, even where the manager's field set still names
// it (someone removed the entry, then wrote the agent's managed fields
// back): an absent entry is not an empty one, unlike a string field
// marked omitempty, which reads as absent when it is "".
func TestHoldsNoAbsentMapEntryForAnEmptyOne(t *testing.T) {
	cluster := shared.Get(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	sets := cluster.Client(t).AppsV1().StatefulSets(ns)
	intruder := metav1.UpdateOptions{FieldManager: "intruder"}

	desired := statefulSet("e0", ns, "app:1", "A", "1").WithAnnotations(map[string]string{"note": ""})
	live := must[*appsv1.StatefulSet](t)(sets.Apply(ctx, desired, applied))
	agents := live.ManagedFields
	delete(live.Annotations, "note")
	live = must[*appsv1.StatefulSet](t)(sets.Update(ctx, live, intruder))
	live.ManagedFields = agents
	live = must[*appsv1.StatefulSet](t)(sets.Update(ctx, live, intruder))
	if _, has := live.Annotations["note"]; has {
		t.Fatal("the annotation is still there")
	}
	if got, want := kube.Holds(live, desired), extracted(t, live, desired); got != want {
		t.Errorf("Holds = %v, Extract… says %v (live annotations %v)", got, want, live.Annotations)
	}
}
