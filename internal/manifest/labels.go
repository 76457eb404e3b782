package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Labels and annotations on managed objects.
const (
	// ManagedByLabel marks every object the agent owns; objects without it
	// are never modified or deleted.
	ManagedByLabel = "unkey.managed.by"
	// ManagedByValue is the label's value.
	ManagedByValue = "krane"
	// DeploymentLabel, SentinelLabel and PolicyLabel carry the resource ID.
	DeploymentLabel = "unkey.deployment.id"
	SentinelLabel   = "unkey.sentinel.id"
	PolicyLabel     = "unkey.ciliumnetworkpolicy.id"
	// HashAnnotation holds the hash of the desired spec last applied.
	HashAnnotation = "deploysync.io/spec-hash"
	// SpecHashLabel carries, on a deployment's pod template and so on each
	// of its Pods, the hash ctrld gives the spec it wants the region to run
	// (DeploymentState.spec_hash; unlike HashAnnotation, which is the
	// agent's own hash of the objects it applies and says nothing about
	// revisions). A Pod keeps the template labels it was created from, so
	// the label says which spec each Pod runs: a StatefulSet's rolling
	// update replaces its Pods one by one, and during it the instances
	// carry different hashes. The status reporter reports each Pod's, and
	// ctrld's health gates count the instances that run the new spec.
	// Adding or changing the label changes the pod template, so it rolls
	// the Pods like any other template change (once for every StatefulSet
	// when an agent first gets hashes from ctrld).
	SpecHashLabel = "unkey.spec.hash"
	// FieldManager is the one server-side-apply manager of the agent.
	FieldManager = "krane"
)

// Hash is a stable hash of the desired objects (JSON-encoded apply
// configurations, before the hash annotation is added).
func Hash(objects ...any) (string, error) {
	h := sha256.New()
	for _, o := range objects {
		b, err := json.Marshal(o)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Stamp annotates a desired object with the hash of its content (before
// the annotation) and returns the hash: one hash per object, so a change
// to one (say, replicas) rewrites only it.
func Stamp[T any](desired T, annotate func(map[string]string) T) (string, error) {
	hash, err := Hash(desired)
	if err != nil {
		return "", err
	}
	annotate(map[string]string{HashAnnotation: hash})
	return hash, nil
}
