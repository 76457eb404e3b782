// Package feedcheck is a model-based, randomized checker of the change feed
// (invariants I1, I2, I4 and I6) on a real database and a real stream.
//
// Many workers run random transactions against the desired-state tables:
// every entity and every operation the desired-state layer (daemon/desired)
// and the Ent client allow — creates, upserts, updates and deletes, one and
// bulk, cascading deployment deletes, scale, stop and start, sentinels,
// policies — several statements to a transaction, some rolled back, some
// held open for a while before they commit, on a small pool of IDs so they
// collide. Meanwhile one follower per region reads the region's
// WatchDeploymentChanges stream from cursor 0 and is cut now and then, so
// it resumes from its bookmarks, as an agent does.
//
// The invariant, checked once the workers are done: every follower's view
// of a region equals the region's desired state in the database — every
// resource present with the same content, nothing else. Besides the live
// follower this holds for followers started afterwards from bookmarks the
// live one passed (its cursor and view then), and for a new one from cursor
// 0. A change row missing for a mutation (a hook that missed a cascaded or
// concurrently added row) leaves a follower with something the database no
// longer has, or without something it has.
//
// Rollout actions among the calls are fenced as a console sends them
// (desired.RolloutFence): with the rollout as read, or with a fence no
// rollout can match again (the version, wave or revision before, a
// rollout that ended), which the desired-state layer must refuse, leaving
// the rollout as it was; a stale fence that acted is a violation too.
//
// Runs are seeded: each worker draws its operations from a generator seeded
// with (seed, worker), so a seed replays the same operations. The exact
// interleaving of the workers is the scheduler's and the database's, so a
// replay reproduces a failure often but not always.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package feedcheck
