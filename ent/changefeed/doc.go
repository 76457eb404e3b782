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
//     transaction before the statement runs, and pin bulk statements to
//     exactly those rows, so a row that starts matching concurrently is
//     neither changed nor missed;
//   - for creates (including upserts, which may update an existing row with
//     a different ID), look the row up by its natural key after the
//     statement ran;
//   - insert one change row per affected (resource, region).
//
// Rows cascaded away by the database (a deleted deployment's topologies and
// policies) never pass a hook of their own, so the deployment hook emits
// their change rows itself.
//
// Actual state (what agents report) is written through ActualState, the one
// path that emits no change row; it accepts only the fields listed as actual
// state per entity and only updates, so desired state cannot sneak through.
package changefeed
