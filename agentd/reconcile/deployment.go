package reconcile

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/manifest"
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
	// What is applied is built by internal/manifest, which ctrld uses to
	// show operators the same objects.
	desired, err := manifest.NewDeployment(s)
	if err != nil {
		return err
	}
	svc, sts, svcHash, stsHash := desired.Service, desired.StatefulSet, desired.ServiceHash, desired.StatefulSetHash
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
