package reconcile

import (
	"context"
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

// collectIDs adds the values of label on objs to ids.
func collectIDs[T metav1.Object](ids map[string]bool, label string, objs []T) {
	for _, o := range objs {
		if id := o.GetLabels()[label]; id != "" {
			ids[id] = true
		}
	}
}

func sortedIDs(ids map[string]bool) []string { return slices.Sorted(maps.Keys(ids)) }

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
// del. It takes the Items of a list, hence values and a pointer type to
// reach their metadata.
func deleteEach[T any, PT interface {
	*T
	metav1.Object
}](ctx context.Context, kind string, objs []T, del func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error) error {
	for i := range objs {
		o := PT(&objs[i])
		err := del(ctx, o.GetNamespace(), o.GetName(), deleteOptions(o))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}
