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
// taken over. Applies that would change nothing make no API call: the live
// object (from the informer cache) must carry the desired spec hash, and the
// fields the agent owns on it must still hold the desired values (an
// out-of-band edit moves a field to another manager and so shows up as
// drift, which the next apply puts back). Deletes find objects by label,
// so they work even when the namespace is no longer known, and list them
// from the API server rather than the cache, so a delete right after an
// apply finds what the apply created.
package reconcile
