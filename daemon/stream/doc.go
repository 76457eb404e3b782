// Package stream serves one agent's WatchDeploymentChanges stream for its
// region, on top of the process-wide tailer.
//
// A stream starts with a full sync (cursor 0) or resumes from a cursor:
//
//   - Full sync (invariant I3): subscribe to the tailer first, which fixes
//     the safe watermark W; then read every resource of the region, kind
//     by kind (daemon/kinds), in keyset pages, each page one statement
//     (which InnoDB reads from one snapshot), and send them; then a bookmark
//     {resume_version: W, full_sync_done: true}. Every page is read after
//     W was fixed, so it shows state at least as new as W, and every change
//     after W reaches the stream live (see fullSync for the whole
//     argument). Changes that commit while the pages stream are sent in
//     between pages, with fresh state, and their resources are skipped when
//     a page reaches them: a large full sync never holds realtime events
//     back, and never overwrites them with older page state. A client
//     that asks for batches (agentd does) gets each page as one message
//     (rpc.Batch: the deployments of a namespace send the fields they
//     share once), each resource in it the event it would have been
//     alone; an older client gets a message per resource.
//   - Resume: changes in (cursor, W] are read from the database (every pk
//     there is settled), then the tailer's early changes above W, then the
//     live notices. A cursor below the retention floor gets resync_required
//     (I5), as does an agent that has not done a resync an operator forced.
//
// Bookmarks are only ever W values the stream has caught up to, so a client
// that resumes from its last bookmark misses nothing (I2). Pause ends the
// delivery of changes until resume, then the stream catches up from its last
// bookmark; forced resync sends resync_required.
//
// No client holds shared capacity while it waits (I8):
//
//   - Database work is short and done before sending: a page, the state of
//     a batch of changes, a read of (cursor, W] each end before their
//     events are sent, on the streams' own connection pool (store.DB), so
//     streams can never take the connections unary calls need.
//   - Events go to the client through a small queue drained by a goroutine
//     of the stream's own (outbox), which runs only while events wait: an
//     idle stream holds no goroutine but its handler. A client that takes
//     no data for SendTimeout while events wait (gRPC accepts none: the
//     client's flow-control window and gRPC's buffer for the stream are
//     full), counted from when it last took some whatever is queued, a
//     keep-alive included, is ended (ErrFellBehind), logged with what was
//     pending, and counted, and its connection is closed (the server says
//     how: WithCloseConnection), for what gRPC queued for it would stay;
//     it resumes from its last bookmark.
//   - At most MaxFullSyncs full syncs read a page at once; a full sync
//     holds its slot only while it reads, never while its client reads (a
//     slow reader would otherwise keep every other region from syncing).
//     At most
//     MaxStreamsPerToken streams per token and MaxStreams in all are
//     served; more are refused with ResourceExhausted.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package stream
