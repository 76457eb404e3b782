package reconcile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// at is where a resource's objects belong: its namespace, and the name
// they take. Identity is whole (invariant I7): the resource's objects
// anywhere else were left behind by a move. The zero at is nowhere, for a
// delete. Each kind says where applying its state puts its objects in one
// function beside its controller (deploymentAt, sentinelAt, policyAt),
// which both its Apply and LeftBehind (through the registry) ask, so the
// two cannot disagree.
type at struct{ namespace, name string }

func (a at) holds(o metav1.Object) bool {
	return o.GetNamespace() == a.namespace && o.GetName() == a.name
}
