// Package retention deletes old deployment_changes rows (invariant I5).
//
// Full syncs read the state tables, so change rows are only needed by
// agents resuming from a cursor. Rows older than the TTL are deleted in
// batches of 10,000, by one ctrld replica at a time (MySQL GET_LOCK), always
// as a prefix by pk: everything at or below the cleanup floor may be gone,
// everything above it is kept. The floor is raised in stream_marks before
// any row is deleted, so a stream never serves a cursor from a range that is
// being emptied: such a cursor gets resync_required instead of a silent
// skip. Rows above the oldest recently-heard agent's acked cursor are kept
// past the TTL (up to MaxAge), so a briefly lagging agent resumes instead of
// resyncing.
//
// Under the same lock it deletes agent records nothing was heard of for
// AgentTTL: no heartbeat, no stream connection, no update. Any identity an
// agent token names gets a record when it opens a stream, so without this
// an abusive or careless client would grow the agents table (and every
// console view, which reads it) without end. A live agent heartbeats every
// few seconds and is never that old; its record, if deleted in a race, is
// written again whole by its next heartbeat.
//
// It also keeps each deployment's newest RevisionsKept revisions (its
// history) and deletes older ones, and deletes the per-resource sync rows
// (resource_syncs) of resources their region no longer desires: intake
// only stores rows for desired resources, but a resource deleted while its
// agent's report was in flight leaves one behind.
//
// And it deletes operator_audit_log rows older than AuditTTL, in batches:
// the log is kept long (400 days by default, a year's audit period with a
// month to spare), but not for ever, since anyone holding a token can add
// to it (refused writes included, though gathered: daemon/operator).
// Fleet halts lifted longer ago than AuditTTL go with it; standing ones
// stay.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package retention
