package rpc

import ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"

// The kinds of resource the stream carries, as both binaries, the API and
// the metrics name them. One vocabulary: a deployment's run in one region
// (the database's deployment_topology row, the API's DeploymentInRegion)
// is the kind "deployment" everywhere outside the database, but for
// PendingChange.resource_type, which names a change row's type as stored
// (PendingChange.kind names its kind). Agents report resource sync state by
// these names, so they are wire format.
const (
	KindDeployment          = "deployment"
	KindSentinel            = "sentinel"
	KindCiliumNetworkPolicy = "cilium_network_policy"
)

// Resource names one resource of a region: its kind and its ID.
type Resource struct {
	Kind string
	ID   string
}

// String returns "kind/id", as logs, errors and reasons name a resource.
func (r Resource) String() string { return r.Kind + "/" + r.ID }

// ResourceOf names the resource a change event is about and the action on
// it. ok is false for events that are about no resource (bookmarks,
// resync requests, and kinds this build does not know); the ID and action
// are returned as sent, unchecked.
func ResourceOf(ev *ctrlv1.DeploymentChangeEvent) (r Resource, action ctrlv1.Action, ok bool) {
	switch e := ev.GetEvent().(type) {
	case *ctrlv1.DeploymentChangeEvent_Deployment:
		return Resource{KindDeployment, e.Deployment.GetDeployment().GetDeploymentId()}, e.Deployment.GetAction(), true
	case *ctrlv1.DeploymentChangeEvent_Sentinel:
		return Resource{KindSentinel, e.Sentinel.GetSentinel().GetSentinelId()}, e.Sentinel.GetAction(), true
	case *ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy:
		return Resource{KindCiliumNetworkPolicy, e.CiliumNetworkPolicy.GetCiliumNetworkPolicy().GetPolicyId()}, e.CiliumNetworkPolicy.GetAction(), true
	}
	return Resource{}, 0, false
}
