// Package changefeed makes invariant I1 hold by construction: every
// mutation of desired state writes its deployment_changes rows in the same
// transaction, for every Ent operation, or fails.
//
// The hooks here are attached to the desired-state schemas (deployment
// topologies, sentinels, Cilium policies, and deployments, whose spec
// reaches agents through their topologies). For each mutation they
//
//   - reject it unless it runs inside a transaction, so the state change
//     and its change rows commit or roll back together;
//   - for updates and deletes, resolve the affected rows inside the
//     transaction before the statement runs, pin bulk statements to
//     exactly those rows (so a row that starts matching concurrently is
//     neither changed nor missed) and lock them (SELECT ... FOR UPDATE);
//   - for creates (including upserts, which may update an existing row with
//     a different ID), look the row up by its natural key after the
//     statement ran, with a locking read;
//   - insert one change row per affected (resource, region).
//
// Actual state (what agents report) is written through ActualState, the one
// path that emits no change row; it accepts only the fields listed as actual
// state per entity and only updates, so desired state cannot sneak through.
//
// # Why the affected rows are complete (invariant I6)
//
// A hook decides which rows a statement touches before the statement runs.
// Under REPEATABLE READ a plain SELECT reads the transaction's snapshot,
// which can lack a row another transaction committed since; the statement
// itself (UPDATE, DELETE, and the cascades they trigger) works on the
// newest committed rows. So every read that decides "what this touches"
// is a locking read (FOR UPDATE), which reads the newest committed rows and
// holds them until commit, and rows that could still appear are kept out
// by a lock on their parent. Entity by entity:
//
//   - deployment_topology, sentinels, cilium_network_policies, update and
//     delete (one or bulk): the IDs are resolved, the statement is pinned
//     to them and the rows are locked. region, deployment_id and the IDs
//     are immutable, so the targets read are the targets touched; a row
//     deleted meanwhile yields a change row for a resource that is gone,
//     which agents read as a delete (harmless).
//   - deployment_topology and cilium_network_policies, create: the
//     deployment they reference is share-locked before the insert
//     (lockParent; the foreign key check takes the same lock, this only
//     makes the order explicit). A transaction deleting or respecifying
//     that deployment has then either committed before (the insert fails
//     its foreign key check, or the topology is created under the new
//     spec) or waits for this one to end.
//   - sentinels and cilium_network_policies, upsert: the statement locks
//     the row it inserts or updates; the lookups after it are locking
//     reads, so they name that row even when it was committed by another
//     transaction after this one's snapshot.
//   - deployments, update of a spec field (image, cpu, memory, port,
//     command, env): every topology of the deployment changes what its
//     region runs. The deployments are locked FOR UPDATE first (waiting
//     for any transaction inserting a child of theirs, which holds a shared
//     lock on them), then their topologies are read with a locking read:
//     every committed topology is listed and none can be added until
//     commit. Workflow fields are actual state: no change row.
//   - deployments, delete (one or bulk): foreign keys with ON DELETE
//     CASCADE remove the deployment's topologies, policies and instances.
//     Cascades run no hooks, so the deployment hook emits their change rows:
//     after locking the deployments, as above, it lists topologies and
//     policies with locking reads; those are exactly the rows the cascade
//     removes. Instances are actual state and need none.
//   - deployments, create or upsert: the statement holds the row's lock;
//     a locking read then lists the topologies an upsert respecified.
//   - deployments, edge writes (adding, removing or clearing topologies or
//     policies through the deployment) would rewrite the children's foreign
//     keys past their hooks, so they are refused (ErrEdgeThroughParent).
//
// The foreign keys are all of the schema's ON DELETE actions: topology →
// deployment (CASCADE), policy → deployment (CASCADE, the column is
// optional), instance → deployment (CASCADE, actual state). No foreign key
// uses SET NULL, and no other table references a desired-state table.
//
// More locks mean more deadlocks between writers (a child insert's shared
// lock and a parent delete's exclusive lock taken in opposite orders); the
// database resolves them by rolling one transaction back, and
// store.WithTx runs such a transaction again.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package changefeed
