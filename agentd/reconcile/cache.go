package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/naming"
)

// Cache is the informer cache of managed objects the controllers read
// instead of the API server.
type Cache struct {
	Factory      informers.SharedInformerFactory
	StatefulSets appslisters.StatefulSetLister
	Deployments  appslisters.DeploymentLister
	Services     corelisters.ServiceLister
	Pods         corelisters.PodLister
	// Informers to add handlers to (drift, status).
	StatefulSetInformer, DeploymentInformer, ServiceInformer, PodInformer cache.SharedIndexInformer

	// matched holds, by UID, the version of each applied object last found
	// to match a desired object, and that object's hash (see upToDate).
	matched sync.Map // types.UID -> match
}

// match is an object's version found to match the desired object of hash.
type match struct{ version, hash string }

// NewCache builds informers over every namespace, limited to objects with
// the managed-by label. Call Start.
func NewCache(client kubernetes.Interface, resync time.Duration) *Cache {
	f := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kube.ManagedSelector }))
	c := &Cache{Factory: f}
	c.StatefulSetInformer = f.Apps().V1().StatefulSets().Informer()
	c.DeploymentInformer = f.Apps().V1().Deployments().Informer()
	c.ServiceInformer = f.Core().V1().Services().Informer()
	c.PodInformer = f.Core().V1().Pods().Informer()
	c.StatefulSets = f.Apps().V1().StatefulSets().Lister()
	c.Deployments = f.Apps().V1().Deployments().Lister()
	c.Services = f.Core().V1().Services().Lister()
	c.Pods = f.Core().V1().Pods().Lister()
	// The status reporter looks objects up by owner every second, and every
	// apply looks for its resource's objects in other namespaces; an index
	// saves a scan of the whole cache per owner.
	c.PodInformer.AddIndexers(cache.Indexers{kube.DeploymentLabel: byLabel(kube.DeploymentLabel)})
	c.StatefulSetInformer.AddIndexers(cache.Indexers{kube.DeploymentLabel: byLabel(kube.DeploymentLabel)})
	c.DeploymentInformer.AddIndexers(cache.Indexers{kube.SentinelLabel: byLabel(kube.SentinelLabel)})
	c.ServiceInformer.AddIndexers(cache.Indexers{
		kube.DeploymentLabel: byLabel(kube.DeploymentLabel),
		kube.SentinelLabel:   byLabel(kube.SentinelLabel),
	})
	for _, informer := range c.AppliedInformers() {
		informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.forget})
	}
	return c
}

// upToDate reports whether live, an object store (an informer's) holds,
// matches the desired object of hash: it carries hash, and same (which
// compares the fields the agent owns, see kube.Holds) says so. A match is
// remembered for live's version, so that resyncs of an object unchanged
// since compare nothing: comparing is half of the CPU of a resync that
// remembers nothing (an agent's first after it starts).
//
// forget drops what is remembered of an object the cache no longer holds.
// One deleted while it was compared here may be forgotten before the
// match is remembered; the store, which drops an object before its
// informer's handlers hear of it, then no longer holds it, and the match
// is dropped again. Otherwise it would stay for good.
func (c *Cache) upToDate(store cache.Store, live metav1.Object, hash string, same func() bool) bool {
	if live.GetAnnotations()[kube.HashAnnotation] != hash {
		return false
	}
	seen := match{version: live.GetResourceVersion(), hash: hash}
	if m, ok := c.matched.Load(live.GetUID()); ok && m.(match) == seen {
		return true
	}
	if !same() {
		return false
	}
	c.matched.Store(live.GetUID(), seen)
	if !stillCached(store, live) {
		c.matched.CompareAndDelete(live.GetUID(), seen)
	}
	return true
}

// stillCached: store has the object o (by name, and by UID: not a namesake).
func stillCached(store cache.Store, o metav1.Object) bool {
	key, err := cache.MetaNamespaceKeyFunc(o)
	if err != nil {
		return false
	}
	obj, ok, err := store.GetByKey(key)
	if err != nil || !ok {
		return false
	}
	held, isObject := obj.(metav1.Object)
	return isObject && held.GetUID() == o.GetUID()
}

// cachedUpToDate is upToDate of a desired object of live's kind, whose
// informer is in, compared by kube.Holds; false when live is nil (the
// cache has no such object).
func cachedUpToDate[T any, P interface {
	*T
	metav1.Object
	runtime.Object
}](c *Cache, in cache.SharedIndexInformer, live P, desired any, hash string) bool {
	return live != nil && c.upToDate(in.GetStore(), live, hash, func() bool { return kube.Holds(live, desired) })
}

// forget drops what upToDate remembers of an object the cache no longer
// holds.
func (c *Cache) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		c.matched.Delete(o.GetUID())
	}
}

// AppliedInformers are the informers of the objects resources are applied
// as (not of Pods, which the workloads make): an out-of-band change to one
// of them re-applies its resource.
func (c *Cache) AppliedInformers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{c.StatefulSetInformer, c.ServiceInformer, c.DeploymentInformer}
}

// byLabel indexes objects by the value of one label.
func byLabel(label string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		o, ok := obj.(metav1.Object)
		if !ok || o.GetLabels()[label] == "" {
			return nil, nil
		}
		return []string{o.GetLabels()[label]}, nil
	}
}

// Owned returns the cached objects of informer whose label (indexed by
// NewCache) has the value id.
func Owned[T any](informer cache.SharedIndexInformer, label, id string) ([]T, error) {
	objs, err := informer.GetIndexer().ByIndex(label, id)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// Start runs the informers and waits for their first list.
func (c *Cache) Start(ctx context.Context) error {
	c.Factory.Start(ctx.Done())
	for typ, ok := range c.Factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}
	return nil
}

// Namespaces is the agent's half of the tenant boundary: it says which
// namespaces the agent may write into, and creates them on first use. A
// namespace is the agent's when it is not reserved (naming.Reserved) and
// carries the managed-by label: the agent created it, labeled, or a cluster
// admin labeled it to hand it over. Any other namespace is refused
// (kube.ErrForeignNamespace), whatever the stream says: an existing one
// without the label is someone else's, even one created between the
// agent's read and its create.
//
// A namespace found to be the agent's is trusted for KnownFor (a minute),
// then read again before the next write or delete there: a label removed
// by an admin (taking the namespace back), or a namespace deleted and
// created again without it, stops the agent's writes and garbage
// collection there within that. Sooner where the shipped
// ValidatingAdmissionPolicy runs (deploy/k8s/agentd.yaml): the API
// server refuses the write as Forbidden at once, and Check reads the
// namespace again and turns the refusal into kube.ErrForeignNamespace, a
// refusal of the agent's own, instead of an error retried for good.
// (A read per minute per namespace in use, not a namespace watch: the
// agent needs no list or watch of namespaces, and nothing to start.)
type Namespaces struct {
	client   kubernetes.Interface
	reserved naming.Reserved
	known    sync.Map // namespaces found to be the agent's -> when (time.Time)
	// KnownFor is how long a namespace found to be the agent's is
	// trusted without reading it again (default NamespaceKnownFor).
	KnownFor time.Duration
}

// NamespaceKnownFor is Namespaces.KnownFor's default.
const NamespaceKnownFor = time.Minute

// NewNamespaces returns the namespaces the agent may write into, refusing
// those reserved holds.
func NewNamespaces(client kubernetes.Interface, reserved naming.Reserved) *Namespaces {
	return &Namespaces{client: client, reserved: reserved, KnownFor: NamespaceKnownFor}
}

// Ensure makes sure ns is the agent's to write into: it creates it,
// labeled as the agent's, when it does not exist, and refuses it
// (kube.ErrForeignNamespace) when it is reserved or exists without the
// label. Namespaces are never deleted by the agent: they may hold things
// it does not own.
func (n *Namespaces) Ensure(ctx context.Context, ns string) error {
	_, err := n.admit(ctx, ns, true)
	return err
}

// Admit is Ensure without the create: it refuses ns when it is reserved or
// exists without the label, and passes when it is missing (the apply that
// writes into it ensures it first).
func (n *Namespaces) Admit(ctx context.Context, ns string) error {
	_, err := n.admit(ctx, ns, false)
	return err
}

// admit is Ensure (create) or Admit; owned says whether ns exists and is
// the agent's, as this call found it (a missing namespace passes Admit
// without being owned). What it finds is returned, not asked of known
// again: another worker may change known meanwhile.
func (n *Namespaces) admit(ctx context.Context, ns string, create bool) (owned bool, err error) {
	if why, reserved := n.reserved.Why(ns); reserved {
		return false, kube.ForeignNamespace(ns, "is reserved: "+why)
	}
	if n.isKnown(ns) {
		return true, nil
	}
	// Not known, or known too long ago: read again.
	live, err := n.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n.known.Delete(ns)
		if !create {
			return false, nil
		}
		// Created only (createOnly): whatever holds the name since the read
		// is read again below, and is the agent's only if labeled so
		// (another worker of this agent ensuring it at the same moment),
		// never taken over.
		_, err = n.client.CoreV1().Namespaces().Apply(ctx,
			corev1ac.Namespace(ns).WithLabels(map[string]string{kube.ManagedByLabel: kube.ManagedByValue}).
				WithResourceVersion(createOnly),
			applyOptions)
		if err == nil {
			n.known.Store(ns, time.Now())
			return true, nil
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			live, err = n.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		}
	}
	if err != nil {
		return false, fmt.Errorf("ensure namespace %s: %w", ns, err)
	}
	if !kube.Managed(live.GetLabels()) {
		n.known.Delete(ns)
		return false, kube.ForeignNamespace(ns, "exists without the "+kube.ManagedSelector+" label: someone else created it (to hand it to the agent, label it so)")
	}
	n.known.Store(ns, time.Now())
	return true, nil
}

// isKnown: ns was found to be the agent's less than KnownFor ago.
func (n *Namespaces) isKnown(ns string) bool {
	at, ok := n.known.Load(ns)
	return ok && time.Since(at.(time.Time)) < n.KnownFor
}

// Owns reports whether ns is the agent's (see Namespaces): deletes act only
// there. An object carrying the agent's labels in any other namespace is
// not the agent's to delete, whoever labeled it: someone allowed to patch
// an object but not to delete it would otherwise have the agent delete it.
// A namespace that does not exist holds nothing to delete.
func (n *Namespaces) Owns(ctx context.Context, ns string) (bool, error) {
	owned, err := n.admit(ctx, ns, false)
	if errors.Is(err, kube.ErrForeignNamespace) {
		return false, nil
	}
	return owned, err
}

// Check passes on err from a write or delete in ns, after asking whether
// ns is still the agent's when err may say it is not: the namespace is
// gone or being deleted (someone deleted it out of band), or the API
// server refused the write (Forbidden: the ValidatingAdmissionPolicy
// refuses writes into a namespace without the label, say after an admin
// took it back). ns is forgotten and read again: no longer the agent's,
// the error is kube.ErrForeignNamespace (a refusal no retry can change,
// see dispatch.Terminal), with the API server's words; still the
// agent's (or missing: the retry creates it), err is passed on and
// retried.
func (n *Namespaces) Check(ctx context.Context, ns string, err error) error {
	if !namespaceGone(err) && !apierrors.IsForbidden(err) {
		return err
	}
	n.known.Delete(ns)
	if foreign := n.Admit(ctx, ns); errors.Is(foreign, kube.ErrForeignNamespace) {
		return fmt.Errorf("%w (the API server said: %v)", foreign, err)
	}
	return err
}

// namespaceGone tells the namespace lifecycle admission's refusals: the
// namespace does not exist, or is terminating.
func namespaceGone(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details != nil && details.Group == "" && details.Kind == "namespaces"
}
