// Package stream serves one agent's WatchDeploymentChanges stream for its
// region, on top of the process-wide tailer.
//
// A stream starts with a full sync (cursor 0) or resumes from a cursor:
//
//   - Full sync (invariant I3): subscribe to the tailer first, which fixes
//     the safe watermark W; then read every topology, sentinel and policy
//     of the region in one consistent snapshot (a REPEATABLE READ read-only
//     transaction, keyset pages) and send them; then a bookmark
//     {resume_version: W, full_sync_done: true}. Changes that commit while
//     the snapshot streams are sent in between pages, with fresh state, and
//     their resources are skipped when the snapshot reaches them: a large
//     full sync never holds realtime events back, and never overwrites them
//     with older snapshot state.
//   - Resume: changes in (cursor, W] are read from the database (every pk
//     there is settled), then the tailer's early changes above W, then the
//     live notices. A cursor below the retention floor gets resync_required
//     (I5), as does an agent that has not done a resync an operator forced.
//
// Bookmarks are only ever W values the stream has caught up to, so a client
// that resumes from its last bookmark misses nothing (I2). Pause ends the
// delivery of changes until resume, then the stream catches up from its last
// bookmark; forced resync sends resync_required.
package stream
