// Package reconcile turns desired state from the stream into Kubernetes
// objects, by server-side apply with one field manager:
//
//   - a deployment becomes a headless Service and a StatefulSet;
//   - a sentinel becomes a Deployment and a ClusterIP Service;
//   - a Cilium network policy becomes a cilium.io/v2 CiliumNetworkPolicy.
//
// Every object carries unkey.managed.by=krane and its resource's ID label,
// and nothing without the managed-by label is ever modified or deleted: an
// unlabeled object in the way is a conflict, reported and retried, never
// taken over. A create reads nothing first: the cache (of managed objects)
// says the object is missing, and the create carries a precondition no
// object meets (objects.go, createOnly), so the API server refuses it,
// writing nothing, when any object holds the name, even one created the
// instant before; only then is the object read, and a foreign one is a
// conflict. Nor is a managed object whose ID label names another
// resource (a policy's name is the user's, so a deleted policy and a new
// namesake meet on one object): it is the other resource's to delete.
// Applies that would change nothing make no API write: the live object
// (from the informer cache; for policies, whose CRD may be missing, a GET)
// must carry the desired spec hash, and the fields the agent owns on it
// must be exactly the desired ones and still hold the desired values
// (kube.Holds; compared once per version of the object: the cache
// remembers a match, see Cache.upToDate; an out-of-band edit makes a new
// version, and moves a field to another manager or changes its value, and
// so shows up as drift, which the next apply puts back). Deletes find
// objects by label, so they work even when the namespace is no longer
// known, and list them from the API server rather
// than the cache, so a delete right after an apply finds what the apply
// created. They delete exactly the object version listed (UID and
// ResourceVersion preconditions) and list again when it changed meanwhile,
// so an object relabelled for another resource in between is left alone.
//
// The tenant boundary, whatever the stream says: objects go only into
// namespaces that are the agent's (Namespaces): not reserved
// (naming.Reserved: kube-*, *-system, default, deploysync, the add-ons',
// the agent's own and
// --reserved-namespaces), and labeled managed-by, because the agent
// created them so or a cluster admin labeled them to hand them over. An
// apply into any other namespace is refused with kube.ErrForeignNamespace
// before anything is written, also when nothing would be; the agent's
// router makes that refusal final for the event (dispatch.Terminal).
// Deletes, garbage collection and the removal of what a move left behind
// act only inside the agent's namespaces (deleteEach, Controllers.Present):
// an object with the agent's labels elsewhere is not the agent's. A
// namespace found to be the agent's is read again after a minute
// (Namespaces.KnownFor), so one an admin takes back (removes the label
// from) stops being written into and collected in; a write the API server
// refuses as Forbidden there (the shipped admission policy) is the
// agent's refusal too (Namespaces.Check).
//
// A resource's identity is whole: kind, namespace and name (invariant I7).
// An ID deleted and applied again in another namespace (or, for a policy,
// under another name) while the agent missed the delete would otherwise
// leave its old objects running: every apply also removes the resource's
// objects anywhere else, the same way a delete does. Where an apply puts a
// resource's objects is one function per kind (deploymentAt, sentinelAt,
// policyAt), which its apply calls and the registry hands to LeftBehind,
// which the agent asks: the two cannot disagree. Deployments and
// sentinels ask the informer cache whether there are objects elsewhere, so
// a no-op apply stays free of API calls; an object created just before the
// move that the cache did not hold yet is checked when it arrives (the
// agent's informer handler re-applies the resource when LeftBehind says
// so). Deployments and sentinels remove those objects before they apply:
// they belong to a resource deleted upstream, which must stop running even
// while the new apply fails. Policies do it the other way round, as Cilium
// allows what no policy selects: the old policy stays until the new one is
// in place. Having no informer, a policy's apply lists its objects across
// the cluster, but only when it may have moved (nothing known of it since
// the controller started, or last applied elsewhere). A full sync applies
// every resource it lists, so an agent that missed a move while it was
// away removes what it left behind then.
//
// # Kinds
//
// The registry (controllers.go, kinds) declares each kind once: its name
// (rpc.Kind*), the label that carries a resource's ID on its objects, the
// state its events carry, where applying that state puts the objects, and
// its controller. The agent builds every controller with NewControllers
// and asks the registry alone: which controller applies or deletes a
// resource (by the kind rpc.ResourceOf names), what is present for
// garbage collection (Controllers.Present), which resources an object
// belongs to (Owners) and whether it was left behind (LeftBehind). Nothing
// else in agentd switches on a kind but the status reporter, as ctrld takes
// a deployment's and a sentinel's status in reports of their own. A new
// kind, once the proto and rpc.ResourceOf carry it, needs here:
//
//   - its controller, in a file of its own: Apply(ctx, state), Delete(ctx,
//     id) and Present(ctx), the function that says where its objects go,
//     and its ID label (kube holds the existing kinds' labels, which other
//     packages read too);
//   - one entry in kinds.
//
// TestEveryKindTheStreamCarriesHasOneController fails until the entry is
// there. Two things follow from what the kind is rather than from its
// being a kind: objects of a Kubernetes type no kind uses yet, to be read
// from the informer cache, need their informer and ID label index in
// NewCache (and in AppliedInformers, for drift); and a status report of
// its own, if ctrld has one for it, belongs in agentd/status.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package reconcile
