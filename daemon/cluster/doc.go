// Package cluster implements the gRPC ClusterService agents call: the watch
// stream (served by package stream) and status intake. Status is actual
// state: it is written without change rows (changefeed.ActualState), each
// report in one transaction, and only for the caller's own region.
//
// Intake trusts nothing an agent sends. Every field is checked before
// anything is written, and a bad one refuses the whole report with
// InvalidArgument naming it:
//   - acked_version is at most the newest version this database issued
//     (the newest change row or the persisted safe watermark) and so below
//     2^63: a cursor no ctrld sent would hide the region's lag and, stored,
//     break whatever reads agent records through Ent's signed scan;
//   - last_full_sync is a valid timestamp in [2000-01-01, now + 5 minutes]
//     (an agent's clock may run a little ahead of ctrld's, not more);
//   - instance sizes, restarts and sentinel replica counts are not
//     negative, and strings and lists have bounds;
//   - an instance's spec hash is a label value (the agent read it from
//     the Pod's label), its reason at most 64 bytes of printable text;
//   - what an agent read from Kubernetes has Kubernetes' form: a Pod name
//     is a DNS subdomain, an address an IP (or empty, before the Pod has
//     one); an identity, a Pod or host name, has no space, control or
//     format character, nor does agent_version;
//   - a report names each thing once: a deployment, a Pod under it, a
//     sentinel, a resource. A copy would redo its writes (a deployment's
//     under its lock) or leave the outcome to the list's order.
//
// Region binding: a deployment report is applied only to deployments with a
// topology in the reporting agent's region, a sentinel report only to
// sentinels of that region, and a resource-sync report only to resources
// the region desires (so the resource_syncs table holds at most a row per
// desired resource; one deleted while its report was in flight leaves a
// row that retention removes). Reports for anything else (deleted meanwhile,
// or desired elsewhere) are ignored, not refused, so an agent whose desired
// state just changed does not lose the rest of its report. A deployment
// report locks only the deployments it applies to, each by its primary key,
// so it neither waits for nor holds up writers of other regions'
// deployments.
//
// Agent records: an agent token may name any identity, and every heartbeat
// and stream of a new identity creates a record, which every console reads
// each second. So a region holds at most Config.MaxAgentsPerRegion records
// (admitAgent, the one check for heartbeats and streams alike): a known
// identity always gets through, with one UPDATE of its record and no lock;
// a new one gets a free place, or the place of a record silent for ten
// minutes (a gone agent's: agents report every ten seconds and streams
// refresh their record), or ResourceExhausted. A region's new identities
// are counted under a lock on the region's row, their records written in
// the same transaction (those that wait together, in one), so a burst
// cannot overshoot, even through several replicas. Retention deletes
// records silent for --agent-ttl, which frees their places too.
package cluster
