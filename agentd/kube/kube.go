package kube

import (
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/internal/manifest"
)

// Labels and annotations on managed objects, and the field manager:
// internal/manifest's, which builds a deployment's objects for the agent
// and for ctrld alike (see there).
const (
	ManagedByLabel  = manifest.ManagedByLabel
	ManagedByValue  = manifest.ManagedByValue
	DeploymentLabel = manifest.DeploymentLabel
	SentinelLabel   = manifest.SentinelLabel
	PolicyLabel     = manifest.PolicyLabel
	HashAnnotation  = manifest.HashAnnotation
	SpecHashLabel   = manifest.SpecHashLabel
	FieldManager    = manifest.FieldManager
)

// ErrBadEvent means an event holds a value the agent cannot put into
// Kubernetes (a spec hash that is no valid label value): ctrld's bug, not
// the cluster's. Like ErrForeignNamespace it is final for the event that
// carried it (dispatch.Terminal): nothing is written, and retrying the
// same event cannot succeed.
var ErrBadEvent = errors.New("the event holds a value the agent cannot apply")

// ManagedSelector selects every object the agent manages.
const ManagedSelector = ManagedByLabel + "=" + ManagedByValue

// ErrConflict means an object with the desired name exists but is not
// managed by the agent; it is left alone and the apply fails (and retries)
// until someone removes or labels it.
var ErrConflict = errors.New("object exists without the " + ManagedByLabel + "=" + ManagedByValue + " label; not taking it over")

// Conflict builds ErrConflict for one object.
func Conflict(kind, namespace, name string) error {
	return fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrConflict)
}

// ErrOwnedByAnother means a managed object with the desired name carries
// another resource's ID label: that resource (say, a policy deleted just
// before a namesake was created) still owns it and will delete it. The
// apply fails and retries until it is gone, rather than taking it over.
var ErrOwnedByAnother = errors.New("object belongs to another resource of the agent; not taking it over")

// OwnedByAnother builds ErrOwnedByAnother for one object and its owner's ID.
func OwnedByAnother(kind, namespace, name, owner string) error {
	return fmt.Errorf("%s %s/%s (owned by %q): %w", kind, namespace, name, owner, ErrOwnedByAnother)
}

// ErrForeignNamespace means the agent will not write into a namespace: a
// reserved one (naming.Reserved: kube-*, *-system, default, the add-ons',
// the agent's own, and
// --reserved-namespaces), or one that exists without the managed-by label,
// which someone else created. It is the agent's half of the tenant
// boundary, whatever the stream names: it writes only into namespaces it
// created, labeled as its own, or that a cluster admin labeled for it.
// Unlike ErrConflict it is final for the event that asked (see the agent's
// router and dispatch.Terminal): retrying cannot succeed until a person
// acts, and the region's cursor must not wait for that.
var ErrForeignNamespace = errors.New("the agent writes only into namespaces labeled " + ManagedByLabel + "=" + ManagedByValue + ", never into reserved ones; not writing into it")

// ForeignNamespace builds ErrForeignNamespace for namespace ns, saying why.
func ForeignNamespace(ns, why string) error {
	return fmt.Errorf("namespace %s %s: %w", ns, why, ErrForeignNamespace)
}

// Managed reports whether labels mark an object as the agent's.
func Managed(labels map[string]string) bool {
	return labels[ManagedByLabel] == ManagedByValue
}

// Hash is a stable hash of the desired objects (manifest.Hash).
func Hash(objects ...any) (string, error) { return manifest.Hash(objects...) }

// Same reports whether two values (say, a desired policy spec and the
// live one) encode equally as JSON.
func Same(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// LabelsOf reads the labels of an informer event's object, whose ID
// labels say which resources it belongs to, unwrapping a delete whose
// final state the informer missed (nil for an object without labels).
func LabelsOf(obj any) map[string]string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(interface{ GetLabels() map[string]string })
	if !ok {
		return nil
	}
	return o.GetLabels()
}
