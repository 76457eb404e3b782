package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/kube"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// PolicyResource is Cilium's CiliumNetworkPolicy.
var PolicyResource = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}

// ErrNoCRD means the cluster does not know CiliumNetworkPolicy (Cilium is
// not installed): policies fail and retry, other resources are unaffected.
var ErrNoCRD = errors.New("the cilium.io/v2 CiliumNetworkPolicy CRD is not installed in this cluster")

// Policies applies Cilium network policies through the dynamic client.
type Policies struct {
	client     dynamic.Interface
	namespaces *Namespaces

	mu sync.Mutex
	// placed is where each policy was last applied by this controller,
	// with nothing of it left anywhere else. A new controller (an agent
	// starting, or starting its term) knows nothing.
	placed map[string]at
}

// NewPolicies returns the policy controller.
func NewPolicies(client dynamic.Interface, ns *Namespaces) *Policies {
	return &Policies{client: client, namespaces: ns, placed: map[string]at{}}
}

// policyAt is where applying p puts the policy's object: named by the
// user.
func policyAt(p *ctrlv1.CiliumNetworkPolicyState) at {
	return at{p.GetNamespace(), p.GetName()}
}

func desiredPolicy(p *ctrlv1.CiliumNetworkPolicyState) *unstructured.Unstructured {
	objLabels := map[string]any{kube.ManagedByLabel: kube.ManagedByValue, kube.PolicyLabel: p.GetPolicyId()}
	if p.GetDeploymentId() != "" {
		objLabels[kube.DeploymentLabel] = p.GetDeploymentId()
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNetworkPolicy",
		"metadata": map[string]any{
			"name":      policyAt(p).name,
			"namespace": policyAt(p).namespace,
			"labels":    objLabels,
		},
		"spec": p.GetSpec().AsMap(),
	}}
}

// Apply makes the policy object match p, and removes any other object of
// the policy (left in another namespace, or under an older name); it writes
// nothing when the object matches and there are none. Unlike the other
// controllers it reads the live objects from the API server (a GET, and a
// list when the policy may have moved) rather than from the informer
// cache: the CRD may be missing (no informer could list it), and reads are
// not writes.
//
// What a move left behind goes only once the policy is in place: Cilium
// allows what no policy selects, so removing the old object first would
// open traffic, and leave it open for as long as this apply fails. The
// cluster-wide list that finds those objects is made only when the policy
// may have moved: nothing is known of it yet (the first apply since the
// controller started), or it was last applied somewhere else. A resync of
// an unchanged policy lists nothing.
func (c *Policies) Apply(ctx context.Context, p *ctrlv1.CiliumNetworkPolicyState) error {
	if p.GetPolicyId() == "" || p.GetNamespace() == "" || p.GetName() == "" {
		return fmt.Errorf("policy event without id, namespace or name: %v", p)
	}
	id, keep := p.GetPolicyId(), policyAt(p)
	last, known := c.lastPlaced(id)
	// Forgotten until this apply succeeds whole: one that wrote the policy
	// at a new place and then failed to remove the old object must list
	// again next time, even when the policy is back where it was
	// remembered by then (the object it wrote would stay behind for good).
	c.forget(id)
	if err := c.write(ctx, p); err != nil {
		return err
	}
	if !known || last != keep {
		if err := relisting(func() error { return c.remove(ctx, id, keep) }); err != nil {
			return err
		}
	}
	c.remember(id, keep)
	return nil
}

// write makes the policy's object at its place match p.
func (c *Policies) write(ctx context.Context, p *ctrlv1.CiliumNetworkPolicyState) error {
	desired := desiredPolicy(p)
	hash, err := kube.Hash(desired.Object)
	if err != nil {
		return err
	}
	desired.SetAnnotations(map[string]string{kube.HashAnnotation: hash})
	ns, name := policyAt(p).namespace, policyAt(p).name
	// Refused before anything is read or written, also when the object
	// there would need no write; ensured once, as applyObjects does.
	if err := c.namespaces.Ensure(ctx, ns); err != nil {
		return err
	}
	res := c.client.Resource(PolicyResource).Namespace(ns)
	live, err := res.Get(ctx, name, metav1.GetOptions{})
	switch {
	case isNoCRD(err):
		return ErrNoCRD
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !kube.Managed(live.GetLabels()):
		return kube.Conflict("CiliumNetworkPolicy", ns, name)
	case live.GetLabels()[kube.PolicyLabel] != p.GetPolicyId():
		// Policies are named by the user but owned by ID: a policy deleted
		// and another created with its name are two keys applied in
		// parallel. The old one's delete removes this object; taking it
		// over now would hand it to that delete. Retry until it is gone.
		return kube.OwnedByAnother("CiliumNetworkPolicy", ns, name, live.GetLabels()[kube.PolicyLabel])
	case live.GetAnnotations()[kube.HashAnnotation] == hash && kube.Same(live.Object["spec"], desired.Object["spec"]):
		// Compared as JSON: the desired spec holds float64 numbers (from
		// structpb) and the live one int64 (from the dynamic client's
		// decoder), which are equal only once encoded.
		return nil // up to date, and not edited out of band
	}
	// The apply goes only where the read looked: onto no object (a
	// create, see createOnly) or onto the one read (its UID). Someone
	// else's policy created or swapped in since then fails the apply
	// instead of being taken over; the retry reads it and says whose.
	if apierrors.IsNotFound(err) {
		desired.SetResourceVersion(createOnly)
	} else {
		desired.SetUID(live.GetUID())
	}
	_, err = res.Apply(ctx, name, desired, applyOptions)
	if isNoCRD(err) {
		return ErrNoCRD
	}
	if err != nil {
		return c.namespaces.Check(ctx, ns, fmt.Errorf("apply CiliumNetworkPolicy %s/%s: %w", ns, name, err))
	}
	return nil
}

// lastPlaced is where the policy was last applied, if known.
func (c *Policies) lastPlaced(id string) (at, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.placed[id]
	return a, ok
}

func (c *Policies) remember(id string, a at) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.placed[id] = a
}

func (c *Policies) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.placed, id)
}

// Delete removes the policy's managed objects wherever they are. It
// forgets where the policy was first: if the delete fails half-way, or an
// apply follows, that apply lists again.
func (c *Policies) Delete(ctx context.Context, id string) error {
	c.forget(id)
	return relisting(func() error { return c.remove(ctx, id, at{}) })
}

// remove deletes the policy's managed objects, in every namespace, except
// the one at keep.
func (c *Policies) remove(ctx context.Context, id string, keep at) error {
	list, err := c.client.Resource(PolicyResource).List(ctx, metav1.ListOptions{
		LabelSelector: kube.ManagedSelector + "," + kube.PolicyLabel + "=" + id,
	})
	if isNoCRD(err) {
		return nil // no CRD, no policies to delete
	}
	if err != nil {
		return fmt.Errorf("list CiliumNetworkPolicies of policy %s: %w", id, err)
	}
	return deleteEach(ctx, c.namespaces, "CiliumNetworkPolicy", list.Items, keep, func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
		return c.client.Resource(PolicyResource).Namespace(ns).Delete(ctx, name, opts)
	})
}

// Present lists the policies' managed objects in the cluster (by ID and
// place; none when the CRD is not installed).
func (c *Policies) Present(ctx context.Context) ([]Placed, error) {
	list, err := c.client.Resource(PolicyResource).List(ctx, metav1.ListOptions{LabelSelector: kube.ManagedSelector})
	if isNoCRD(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	found := map[Placed]bool{}
	for _, o := range list.Items {
		if id := o.GetLabels()[kube.PolicyLabel]; id != "" {
			found[Placed{ID: id, Namespace: o.GetNamespace(), Name: o.GetName()}] = true
		}
	}
	return sortedPlaced(found), nil
}

// isNoCRD tells a missing resource type from a missing object.
func isNoCRD(err error) bool {
	if err == nil {
		return false
	}
	if meta.IsNoMatchError(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && apierrors.IsNotFound(err) {
		details := status.Status().Details
		return details == nil || details.Name == ""
	}
	return false
}
