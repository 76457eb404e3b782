package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"github.com/deploysync/deploysync/agentd/kube"
)

// managedWith selects the managed objects of one resource.
func managedWith(label, id string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{kube.ManagedByLabel: kube.ManagedByValue, label: id})
}

// Placed is one managed object of a resource, for garbage collection: the
// resource's ID (from the object's label) and where the object is.
type Placed struct {
	ID, Namespace, Name string
}

// collectPlaced adds to found each of objs labelled with a resource ID.
func collectPlaced[T metav1.Object](found map[Placed]bool, label string, objs []T) {
	for _, o := range objs {
		if id := o.GetLabels()[label]; id != "" {
			found[Placed{ID: id, Namespace: o.GetNamespace(), Name: o.GetName()}] = true
		}
	}
}

func sortedPlaced(found map[Placed]bool) []Placed {
	return slices.SortedFunc(maps.Keys(found), func(a, b Placed) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// relisting runs a list-then-delete again while a delete finds its object
// changed since it was listed (deleteOptions' preconditions fail with a
// conflict): the new list says whether the object is still the resource's
// to delete. A StatefulSet whose status moved meanwhile is simply deleted
// on the next pass; a policy relabelled for another resource is no longer
// listed and stays.
func relisting(listAndDelete func() error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, listAndDelete)
}

// deleteEach deletes objs (exactly the ones seen, by UID and version) with
// del, except the one at keep and those in namespaces that are not the
// agent's (Namespaces.Owns): garbage collection, deletes and the removal
// of what a move left behind act only inside the agent's own namespaces.
// It takes the Items of a list, hence values and a pointer type to reach
// their metadata.
func deleteEach[T any, PT interface {
	*T
	metav1.Object
}](ctx context.Context, namespaces *Namespaces, kind string, objs []T, keep at, del func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error) error {
	for i := range objs {
		o := PT(&objs[i])
		if keep.holds(o) {
			continue
		}
		if owned, err := namespaces.Owns(ctx, o.GetNamespace()); err != nil {
			return fmt.Errorf("delete %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err)
		} else if !owned {
			continue
		}
		err := del(ctx, o.GetNamespace(), o.GetName(), deleteOptions(o))
		if err != nil && !apierrors.IsNotFound(err) {
			// Refused by the API server (Forbidden) in a namespace no longer
			// the agent's, found so now: not the agent's to delete either.
			err = namespaces.Check(ctx, o.GetNamespace(), err)
			if errors.Is(err, kube.ErrForeignNamespace) {
				continue
			}
			return fmt.Errorf("delete %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}
