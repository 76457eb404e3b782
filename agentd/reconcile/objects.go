package reconcile

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
)

// object is one of the Kubernetes objects a resource is applied as (a
// deployment's Service and StatefulSet, a sentinel's Service and
// Deployment), for applyObjects.
type object struct {
	kind, name string
	// upToDate: the cached live object matches the desired one.
	upToDate bool
	// uid is the object's UID in the cache, which holds only managed
	// objects; "" when the cache does not have it.
	uid types.UID
	// meta is the desired object's metadata, which apply sends: a create
	// sets its resourceVersion (see createOnly).
	meta *metav1ac.ObjectMetaApplyConfiguration
	// live reads the live object from the API server.
	live func(context.Context) (metav1.Object, error)
	// apply server-side applies the desired object.
	apply func(context.Context) error
}

// applyOptions are every controller's server-side apply options.
var applyOptions = metav1.ApplyOptions{FieldManager: kube.FieldManager, Force: true}

// createOnly is the resourceVersion a create sends: no object ever has it
// (etcd revisions are int64 counters that start at 1), and the API server
// takes a resourceVersion in an apply as a precondition, so the apply
// creates the object when the name is free and fails with a conflict,
// writing nothing, when anything holds it. Checked against Kubernetes 1.36
// for Services, StatefulSets and Deployments: an absent object is created
// as if applied without it, with the field manager's Apply entry
// (TestCreateCostsOneWritePerObjectAndNoRead), a present one, managed or
// not, is refused (TestCreateIsNoTakeOverEvenInARace, for a deployment's
// objects). A UID precondition would not do: the API server
// refuses it when no object exists.
const createOnly = "9223372036854775807"

// applyObjects applies, in order, the objects that are not up to date,
// after making sure their namespace is the agent's (Namespaces.Ensure,
// which creates it when missing); it writes nothing when all are. The
// namespace is asked first, even when nothing would be written: objects
// in a namespace that is reserved or someone else's (left there by an
// older agent, say) are refused, not reported in sync; a namespace
// already found to be the agent's costs nothing. An object missing from
// the cache, which holds managed objects only, is created: one write, no
// read. Whatever holds its name meanwhile (an object without the
// managed-by label, never cached; or one of ours the cache has not seen
// yet) fails the create, atomically in the API server, and only then is
// the object read: one without the managed-by label belongs to someone
// else and is never taken over.
func applyObjects(ctx context.Context, namespaces *Namespaces, ns string, objects ...object) error {
	if err := namespaces.Ensure(ctx, ns); err != nil {
		return err
	}
	if !slices.ContainsFunc(objects, func(o object) bool { return !o.upToDate }) {
		return nil
	}
	for _, o := range objects {
		if o.upToDate {
			continue
		}
		if err := applyObject(ctx, ns, o); err != nil {
			return namespaces.Check(ctx, ns, err)
		}
	}
	return nil
}

// applyObject applies one object: a create when the cache does not hold
// it, an apply otherwise or when the create finds a managed object.
func applyObject(ctx context.Context, ns string, o object) error {
	if o.uid == "" {
		o.meta.WithResourceVersion(createOnly)
		err := o.apply(ctx)
		o.meta.ResourceVersion = nil
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("create %s %s/%s: %w", o.kind, ns, o.name, err)
			}
			return nil
		}
		// The name is taken: by someone else's object, or by ours if an
		// apply created it since the cache last looked.
		live, err := o.live(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("create %s %s/%s: the object that held its name is gone; trying again", o.kind, ns, o.name)
		case err != nil:
			return fmt.Errorf("read %s %s/%s: %w", o.kind, ns, o.name, err)
		case !kube.Managed(live.GetLabels()):
			return kube.Conflict(o.kind, ns, o.name)
		}
		o.uid = live.GetUID()
	}
	// Only onto the object found to be ours: one deleted and replaced by
	// someone else's since fails this precondition (409) instead of being
	// taken over by the forced apply.
	o.meta.WithUID(o.uid)
	err := o.apply(ctx)
	o.meta.UID = nil
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.kind, ns, o.name, err)
	}
	return nil
}

// stamp annotates a desired object with the hash of its content (before
// the annotation) and returns the hash: one hash per object, so a change
// to one (say, replicas) rewrites only it.
func stamp[T any](desired T, annotate func(map[string]string) T) (string, error) {
	hash, err := kube.Hash(desired)
	if err != nil {
		return "", err
	}
	annotate(map[string]string{kube.HashAnnotation: hash})
	return hash, nil
}

// cachedOrNil is a cache lookup's object, nil when the cache has none.
func cachedOrNil[T any](live *T, err error) (*T, error) {
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// liveOf is a Get's object as a metav1.Object, nil on error (a nil
// typed pointer must not become a non-nil interface).
func liveOf[T any, P interface {
	*T
	metav1.Object
}](o P, err error) (metav1.Object, error) {
	if err != nil || o == nil {
		return nil, err
	}
	return o, nil
}

// uidOf is a cached object's UID, "" when the cache has none.
func uidOf[T any, P interface {
	*T
	metav1.Object
}](o P) types.UID {
	if o == nil {
		return ""
	}
	return o.GetUID()
}
