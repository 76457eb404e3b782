package reconcile

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// workload finds and removes the objects a deployment or a sentinel is
// applied as, by its ID label: the informer cache says whether any are
// somewhere else, the API server lists them for removal.
type workload struct {
	resource   string // "deployment" or "sentinel", for errors
	label      string // the ID label
	kinds      []objectKind
	namespaces *Namespaces
}

// objectKind is one kind of object a workload is applied as.
type objectKind struct {
	// informer caches the objects of the kind, indexed by label (NewCache).
	informer cache.SharedIndexInformer
	// remove lists the objects opts selects, in every namespace, from the
	// API server and deletes those not at keep, in the namespaces that
	// are the agent's; of names their resource, for errors.
	remove func(ctx context.Context, of string, opts metav1.ListOptions, keep at) error
}

// removeLeftBehind removes the resource's objects that are not at keep:
// an ID deleted and deployed again in another namespace, the delete
// missed (the agent stopped before applying it, or it was past retention
// and only a full sync followed), leaves the old ones running. The
// informer cache says whether there are any, so a no-op apply stays free;
// one it does not hold yet is caught when it arrives (see LeftBehind).
func (w workload) removeLeftBehind(ctx context.Context, id string, keep at) error {
	for _, k := range w.kinds {
		objs, err := Owned[metav1.Object](k.informer, w.label, id)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if keep.holds(o) {
				continue
			}
			// Objects carrying the resource's labels in a namespace that is
			// not the agent's are not its to remove (see deleteEach); they
			// do not make every apply list the cluster.
			if owned, err := w.namespaces.Owns(ctx, o.GetNamespace()); err != nil || owned {
				return w.remove(ctx, id, keep)
			}
		}
	}
	return nil
}

// remove deletes the resource's objects of every kind, in every
// namespace, except those at keep. It lists them from the API server, not
// the cache: objects an apply has just created may not be in the cache
// yet, and a delete that missed them would be acked while they keep
// running.
func (w workload) remove(ctx context.Context, id string, keep at) error {
	of := w.resource + " " + id
	opts := metav1.ListOptions{LabelSelector: managedWith(w.label, id).String()}
	return relisting(func() error {
		for _, k := range w.kinds {
			if err := k.remove(ctx, of, opts, keep); err != nil {
				return err
			}
		}
		return nil
	})
}

func statefulSets(client kubernetes.Interface, c *Cache, namespaces *Namespaces) objectKind {
	return objectKind{informer: c.StatefulSetInformer, remove: func(ctx context.Context, of string, opts metav1.ListOptions, keep at) error {
		list, err := client.AppsV1().StatefulSets(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list StatefulSets of %s: %w", of, err)
		}
		return deleteEach(ctx, namespaces, "StatefulSet", list.Items, keep, func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return client.AppsV1().StatefulSets(ns).Delete(ctx, name, opts)
		})
	}}
}

func deployments(client kubernetes.Interface, c *Cache, namespaces *Namespaces) objectKind {
	return objectKind{informer: c.DeploymentInformer, remove: func(ctx context.Context, of string, opts metav1.ListOptions, keep at) error {
		list, err := client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list Deployments of %s: %w", of, err)
		}
		return deleteEach(ctx, namespaces, "Deployment", list.Items, keep, func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return client.AppsV1().Deployments(ns).Delete(ctx, name, opts)
		})
	}}
}

func services(client kubernetes.Interface, c *Cache, namespaces *Namespaces) objectKind {
	return objectKind{informer: c.ServiceInformer, remove: func(ctx context.Context, of string, opts metav1.ListOptions, keep at) error {
		list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list Services of %s: %w", of, err)
		}
		return deleteEach(ctx, namespaces, "Service", list.Items, keep, func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return client.CoreV1().Services(ns).Delete(ctx, name, opts)
		})
	}}
}
