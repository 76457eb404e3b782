package reconcile

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// at is where a resource's objects belong: its namespace, and the name
// they take. Identity is whole (invariant I7): the resource's objects
// anywhere else were left behind by a move. The zero at is nowhere, for a
// delete.
type at struct{ namespace, name string }

func (a at) holds(o metav1.Object) bool {
	return o.GetNamespace() == a.namespace && o.GetName() == a.name
}

// elsewhere reports whether any of objs is not at a.
func elsewhere[T metav1.Object](a at, objs []T) bool {
	return slices.ContainsFunc(objs, func(o T) bool { return !a.holds(o) })
}

// deploymentAt, sentinelAt and policyAt are where applying a resource puts
// its objects: a deployment's are named by its ID, a sentinel's by
// naming.Sentinel, a policy's by the user. The applies and LeftBehind all
// ask them, so the two cannot disagree.
func deploymentAt(s *ctrlv1.DeploymentState) at {
	return at{s.GetNamespace(), s.GetDeploymentId()}
}

func sentinelAt(s *ctrlv1.SentinelState) at {
	return at{s.GetNamespace(), naming.Sentinel(s.GetSentinelId())}
}

func policyAt(p *ctrlv1.CiliumNetworkPolicyState) at {
	return at{p.GetNamespace(), p.GetName()}
}

// LeftBehind reports whether o, an object of the resource that ev applies,
// is somewhere else than where that apply puts the resource's objects:
// left behind by a move. An event of no kind the agent applies places
// nothing, so it reports false.
func LeftBehind(ev *ctrlv1.DeploymentChangeEvent, o metav1.Object) bool {
	var a at
	switch e := ev.GetEvent().(type) {
	case *ctrlv1.DeploymentChangeEvent_Deployment:
		a = deploymentAt(e.Deployment.GetDeployment())
	case *ctrlv1.DeploymentChangeEvent_Sentinel:
		a = sentinelAt(e.Sentinel.GetSentinel())
	case *ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy:
		a = policyAt(e.CiliumNetworkPolicy.GetCiliumNetworkPolicy())
	default:
		return false
	}
	return !a.holds(o)
}
