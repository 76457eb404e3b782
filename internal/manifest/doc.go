// Package manifest builds the Kubernetes objects a deployment runs as in a
// region, from the state the stream carries (ctrlv1.DeploymentState): a
// headless Service and a StatefulSet, as server-side apply configurations,
// stamped with the hash of their content (HashAnnotation). agentd applies
// exactly what Deployment returns; ctrld builds the same objects to show an
// operator the YAML the agent applies (OperatorService.GetDesiredState, the
// console's `y`), so the two cannot disagree; it shows them with keyed
// hashes (Deployment.Rehashed, daemon/viewhash).
//
// It also owns the names both sides use for the marks on managed objects:
// the managed-by and ID labels, the spec-hash label and annotation, and the
// field manager (agentd/kube re-exports them for the agent's packages).
//
// It holds no client: it imports Kubernetes' API types and client-go's
// apply configurations only. scripts/check-rooms.sh lets ctrld link it and
// what those configurations import, and nothing else of client-go.
package manifest
