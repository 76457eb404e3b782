package reconcile

import (
	"context"
	"fmt"

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
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// SentinelPort is the port a sentinel listens on and its Service serves.
const SentinelPort = 8080

// Sentinels runs each sentinel as a Deployment and a ClusterIP Service,
// both named "sentinel-<id>".
type Sentinels struct {
	client     kubernetes.Interface
	cache      *Cache
	namespaces *Namespaces
	objects    workload
}

// NewSentinels returns the sentinel controller.
func NewSentinels(client kubernetes.Interface, cache *Cache, ns *Namespaces) *Sentinels {
	return &Sentinels{client: client, cache: cache, namespaces: ns, objects: workload{
		resource: "sentinel", label: kube.SentinelLabel,
		kinds: []objectKind{deployments(client, cache, ns), services(client, cache, ns)}, namespaces: ns,
	}}
}

// sentinelAt is where applying s puts the sentinel's objects: named by
// naming.Sentinel.
func sentinelAt(s *ctrlv1.SentinelState) at {
	return at{s.GetNamespace(), naming.Sentinel(s.GetSentinelId())}
}

func desiredSentinel(s *ctrlv1.SentinelState) (*corev1ac.ServiceApplyConfiguration, *appsv1ac.DeploymentApplyConfiguration) {
	name, ns := sentinelAt(s).name, s.GetNamespace()
	objLabels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.SentinelLabel: s.GetSentinelId()}
	selector := map[string]string{kube.SentinelLabel: s.GetSentinelId()}
	svc := corev1ac.Service(name, ns).WithLabels(objLabels).WithSpec(corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeClusterIP).
		WithSelector(selector).
		WithPorts(corev1ac.ServicePort().WithName("http").WithPort(SentinelPort).WithTargetPort(intstr.FromInt32(SentinelPort))))
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(s.GetCpuMillicores()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(s.GetMemoryMib())*1024*1024, resource.BinarySI),
	}
	dep := appsv1ac.Deployment(name, ns).WithLabels(objLabels).WithSpec(appsv1ac.DeploymentSpec().
		WithReplicas(s.GetReplicas()).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(objLabels).
			WithSpec(corev1ac.PodSpec().
				WithRestartPolicy(corev1.RestartPolicyAlways).
				WithContainers(corev1ac.Container().
					WithName("sentinel").
					WithImage(s.GetImage()).
					WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(SentinelPort)).
					WithResources(corev1ac.ResourceRequirements().WithRequests(resources).WithLimits(resources))))))
	return svc, dep
}

// Apply makes the sentinel's objects match s, and removes any it has in
// another namespace (see workload.removeLeftBehind); it writes nothing
// when they already do and there are none.
func (c *Sentinels) Apply(ctx context.Context, s *ctrlv1.SentinelState) error {
	if s.GetSentinelId() == "" || s.GetNamespace() == "" {
		return fmt.Errorf("sentinel event without id or namespace: %v", s)
	}
	// Left-behind objects go first, as a deployment's do (see
	// Deployments.Apply).
	if err := c.objects.removeLeftBehind(ctx, s.GetSentinelId(), sentinelAt(s)); err != nil {
		return err
	}
	svc, dep := desiredSentinel(s)
	svcHash, err := stamp(svc, svc.WithAnnotations)
	if err != nil {
		return err
	}
	depHash, err := stamp(dep, dep.WithAnnotations)
	if err != nil {
		return err
	}
	name, ns := sentinelAt(s).name, s.GetNamespace()
	liveSvc, err := cachedOrNil(c.cache.Services.Services(ns).Get(name))
	if err != nil {
		return err
	}
	liveDep, err := cachedOrNil(c.cache.Deployments.Deployments(ns).Get(name))
	if err != nil {
		return err
	}
	return applyObjects(ctx, c.namespaces, ns,
		object{kind: "Service", name: name, upToDate: cachedUpToDate(c.cache, c.cache.ServiceInformer, liveSvc, svc, svcHash), uid: uidOf(liveSvc), meta: svc.ObjectMetaApplyConfiguration,
			live: func(ctx context.Context) (metav1.Object, error) {
				return liveOf(c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}))
			},
			apply: func(ctx context.Context) error {
				_, err := c.client.CoreV1().Services(ns).Apply(ctx, svc, applyOptions)
				return err
			}},
		object{kind: "Deployment", name: name, upToDate: cachedUpToDate(c.cache, c.cache.DeploymentInformer, liveDep, dep, depHash), uid: uidOf(liveDep), meta: dep.ObjectMetaApplyConfiguration,
			live: func(ctx context.Context) (metav1.Object, error) {
				return liveOf(c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}))
			},
			apply: func(ctx context.Context) error {
				_, err := c.client.AppsV1().Deployments(ns).Apply(ctx, dep, applyOptions)
				return err
			}},
	)
}

// Delete removes the sentinel's managed objects wherever they are (see
// workload.remove).
func (c *Sentinels) Delete(ctx context.Context, id string) error {
	return c.objects.remove(ctx, id, at{})
}

// Present lists the sentinels' managed objects in the cluster (by ID and
// place), for garbage collection after a full sync.
func (c *Sentinels) Present(context.Context) ([]Placed, error) {
	found := map[Placed]bool{}
	deps, err := c.cache.Deployments.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	collectPlaced(found, kube.SentinelLabel, deps)
	svcs, err := c.cache.Services.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	collectPlaced(found, kube.SentinelLabel, svcs)
	return sortedPlaced(found), nil
}
