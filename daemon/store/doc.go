// Package store opens ctrld's database: the one constructor production code
// and tests share, so the Ent runtime (schema hooks, defaults, validators)
// is always registered — without the ent/runtime import the change-feed
// hooks would silently not run. It also owns schema migration and the
// transaction helper every desired-state write goes through.
//
// The database is opened as two pools (see DB): one for the watch streams
// and one for everything else, so that no number of streams can take the
// connections unary calls need (invariant I8).
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package store
