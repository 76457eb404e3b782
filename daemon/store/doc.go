// Package store opens ctrld's database: the one constructor production code
// and tests share, so the Ent runtime (schema hooks, defaults, validators)
// is always registered — without the ent/runtime import the change-feed
// hooks would silently not run. It also owns schema migration and the
// transaction helper every desired-state write goes through.
package store
