package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Deployments runs deployments as a headless Service plus a StatefulSet.
type Deployments struct {
	client     kubernetes.Interface
	cache      *Cache
	namespaces *Namespaces
	objects    workload
}

// NewDeployments returns the deployment controller.
func NewDeployments(client kubernetes.Interface, cache *Cache, ns *Namespaces) *Deployments {
	return &Deployments{client: client, cache: cache, namespaces: ns, objects: workload{
		resource: "deployment", label: kube.DeploymentLabel,
		kinds: []objectKind{statefulSets(client, cache, ns), services(client, cache, ns)}, namespaces: ns,
	}}
}

// deploymentAt is where applying s puts the deployment's objects: named
// by its ID.
func deploymentAt(s *ctrlv1.DeploymentState) at {
	return at{s.GetNamespace(), s.GetDeploymentId()}
}

// desiredDeployment builds the Service and StatefulSet for a deployment,
// without the hash annotation.
func desiredDeployment(s *ctrlv1.DeploymentState) (*corev1ac.ServiceApplyConfiguration, *appsv1ac.StatefulSetApplyConfiguration) {
	id, ns := s.GetDeploymentId(), s.GetNamespace()
	name := deploymentAt(s).name
	objLabels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id}
	selector := map[string]string{kube.DeploymentLabel: id}
	port := s.GetPort()
	if port == 0 {
		port = 8080
	}

	svc := corev1ac.Service(name, ns).WithLabels(objLabels).WithSpec(corev1ac.ServiceSpec().
		WithClusterIP(corev1.ClusterIPNone).
		WithPublishNotReadyAddresses(true).
		WithSelector(selector).
		WithPorts(corev1ac.ServicePort().WithName("http").WithPort(port).WithTargetPort(intstr.FromInt32(port))))

	resources := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(s.GetCpuMillicores()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(s.GetMemoryMib())*1024*1024, resource.BinarySI),
	}
	container := corev1ac.Container().
		WithName("app").
		WithImage(s.GetImage()).
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(port)).
		WithResources(corev1ac.ResourceRequirements().WithRequests(resources).WithLimits(resources))
	if len(s.GetCommand()) > 0 {
		container.WithCommand(s.GetCommand()...)
	}
	for _, name := range slices.Sorted(maps.Keys(s.GetEnv())) {
		container.WithEnv(corev1ac.EnvVar().WithName(name).WithValue(s.GetEnv()[name]))
	}
	// The spec hash goes on the pod template only (kube.SpecHashLabel): on
	// the Pods it says which spec each runs; not in the selector, which
	// is immutable and must keep selecting the Pods of every revision.
	podLabels := maps.Clone(objLabels)
	if hash := s.GetSpecHash(); hash != "" {
		podLabels[kube.SpecHashLabel] = hash
	}
	sts := appsv1ac.StatefulSet(name, ns).WithLabels(objLabels).WithSpec(appsv1ac.StatefulSetSpec().
		WithReplicas(s.GetReplicas()).
		WithServiceName(name).
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(podLabels).
			WithSpec(corev1ac.PodSpec().
				WithRestartPolicy(corev1.RestartPolicyAlways).
				WithContainers(container))))
	return svc, sts
}

// Apply makes the deployment's objects match s, and removes any it has in
// another namespace (see workload.removeLeftBehind); it writes nothing
// when they already do and there are none.
func (d *Deployments) Apply(ctx context.Context, s *ctrlv1.DeploymentState) error {
	if s.GetDeploymentId() == "" || s.GetNamespace() == "" {
		return fmt.Errorf("deployment event without id or namespace: %v", s)
	}
	if err := checkSpecHash(s.GetSpecHash()); err != nil {
		return fmt.Errorf("deployment %s: %w", s.GetDeploymentId(), err)
	}
	// What a move left behind goes first, so it goes even while this
	// apply fails: it belongs to a deployment deleted upstream, which must
	// not keep running (and, unlike a policy's, removing it opens
	// nothing; see Policies.Apply).
	if err := d.objects.removeLeftBehind(ctx, s.GetDeploymentId(), deploymentAt(s)); err != nil {
		return err
	}
	svc, sts := desiredDeployment(s)
	svcHash, err := stamp(svc, svc.WithAnnotations)
	if err != nil {
		return err
	}
	stsHash, err := stamp(sts, sts.WithAnnotations)
	if err != nil {
		return err
	}
	place := deploymentAt(s)
	ns, name := place.namespace, place.name
	liveSvc, err := cachedOrNil(d.cache.Services.Services(ns).Get(name))
	if err != nil {
		return err
	}
	liveSts, err := cachedOrNil(d.cache.StatefulSets.StatefulSets(ns).Get(name))
	if err != nil {
		return err
	}
	return applyObjects(ctx, d.namespaces, ns,
		object{kind: "Service", name: name, upToDate: cachedUpToDate(d.cache, d.cache.ServiceInformer, liveSvc, svc, svcHash), uid: uidOf(liveSvc), meta: svc.ObjectMetaApplyConfiguration,
			live: func(ctx context.Context) (metav1.Object, error) {
				return liveOf(d.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}))
			},
			apply: func(ctx context.Context) error {
				_, err := d.client.CoreV1().Services(ns).Apply(ctx, svc, applyOptions)
				return err
			}},
		object{kind: "StatefulSet", name: name, upToDate: cachedUpToDate(d.cache, d.cache.StatefulSetInformer, liveSts, sts, stsHash), uid: uidOf(liveSts), meta: sts.ObjectMetaApplyConfiguration,
			live: func(ctx context.Context) (metav1.Object, error) {
				return liveOf(d.client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{}))
			},
			apply: func(ctx context.Context) error {
				_, err := d.client.AppsV1().StatefulSets(ns).Apply(ctx, sts, applyOptions)
				return err
			}},
	)
}

// Delete removes the deployment's managed objects wherever they are (see
// workload.remove).
func (d *Deployments) Delete(ctx context.Context, id string) error {
	return d.objects.remove(ctx, id, at{})
}

// Present lists the deployments' managed objects in the cluster (by ID and
// place), for garbage collection after a full sync.
func (d *Deployments) Present(context.Context) ([]Placed, error) {
	found := map[Placed]bool{}
	sets, err := d.cache.StatefulSets.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	collectPlaced(found, kube.DeploymentLabel, sets)
	svcs, err := d.cache.Services.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	collectPlaced(found, kube.DeploymentLabel, svcs)
	return sortedPlaced(found), nil
}

// deleteOptions deletes exactly the object seen, in the version seen, and
// lets the garbage collector remove its Pods. The UID alone rules out a
// namesake created meanwhile, but not the same object changed meanwhile:
// server-side apply keeps the UID when it relabels an object for another
// resource (a policy recreated under the same name), and the delete would
// remove what that resource just applied. A changed object fails with a
// conflict, and the caller lists again (relisting) to see whose it is now.
func deleteOptions(o metav1.Object) metav1.DeleteOptions {
	policy := metav1.DeletePropagationBackground
	uid, version := o.GetUID(), o.GetResourceVersion()
	return metav1.DeleteOptions{PropagationPolicy: &policy,
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &version}}
}

// checkSpecHash refuses a spec hash that cannot be a label value
// (validate.SpecHash) before anything is written: the API server would
// refuse the StatefulSet anyway, less clearly, and only after what a move
// left behind was removed. Empty is allowed: a ctrld that sends no hash
// gets no label.
func checkSpecHash(hash string) error {
	if err := validate.SpecHash(hash); err != nil {
		return fmt.Errorf("spec_hash: %w: %w", err, kube.ErrBadEvent)
	}
	return nil
}
