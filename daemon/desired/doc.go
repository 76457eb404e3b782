// Package desired is the write side of desired state: the few operations
// that change what agents must run (deploy, update, start/stop, scale,
// rollback, sentinels, Cilium policies) and how regions are served (pause,
// forced resync), each one transaction. The operator API only translates
// requests into these calls. The change rows themselves are
// written by the Ent hooks in ent/changefeed, so nothing here can forget
// them; this package owns the rules about what a valid change is and turns
// them into clear errors: ErrInvalid for bad input (naming the field),
// ErrConflict for a well-formed request that contradicts existing state.
//
// The rules that keep every accepted resource one that agents and
// Kubernetes can hold:
//
//   - Size: a deployment's image, command and env together, and a policy's
//     spec (as stored and as the stream sends it), are at most
//     limits.MaxResourceBytes, so every stream event fits a message an
//     agent receives. Values are ones Kubernetes and a process can carry
//     (internal/validate).
//
//   - Namespaces: naming.Namespace maps different (workspace, environment)
//     pairs to one name now and then. The first pair to put a resource in a
//     namespace claims it (the namespaces table, in the same transaction);
//     every other pair gets ErrConflict. Claims stay after their resources
//     are gone, since agents may still hold objects there.
//     ClaimExistingNamespaces claims the namespaces of a database written
//     before claims existed; ctrld runs it after migrating the schema.
//
//   - Reserved namespaces (the tenant boundary): a pair whose namespace
//     naming.Reserved holds (kube-*, *-system, default, the add-ons', the
//     agents' namespace, what
//     --reserved-namespaces lists) is refused as ErrInvalid before any
//     statement, by every call that takes a pair, so workspace "kube" and
//     environment "system" never reach kube-system. Claims made before a
//     name was reserved are never rewritten: ReportReservedClaims logs them
//     at start, and the agents refuse to write there on their own.
//
//   - Ownership: a policy owned by a deployment goes only to a region,
//     workspace and environment that deployment runs in, and keeps its
//     owner for life (the database cascades it away with the deployment).
//
//   - Regions: a deploy names at most MaxDeployRegions, so it stays one
//     short transaction whatever the caller sends.
//
//   - Revisions: every action that changes a deployment's desired state
//     (deploy, update, scale, start, stop, rollback) writes, in its own
//     transaction, one DeploymentRevision: the whole spec after it, who
//     (WithActor), and the range of change rows it wrote. Such actions
//     take the deployment's row lock first, so they run one at a time per
//     deployment and number revisions without gaps or duplicates; a
//     deployment from before revisions starts its history at its next
//     action. Rollback restores an earlier revision's spec and replicas.
//
// Deploys run one at a time (each locks the first region's row): run
// together, the change feed's locking reads make them deadlock on the
// topology index whatever their regions (see oneDeployAtATime). Every other
// write here is one transaction that store.WithTx reruns after a deadlock.
package desired
