// Package changelog owns the change log, deployment_changes, everywhere
// but its appends: those are the Ent hooks' (ent/changefeed), so no
// mutation can forget its row (I1). Every other statement about the log
// is a named function here — reading it by cursor, by region or by
// resource; its head and newest versions; what is pending above a cursor;
// the stream marks (the safe watermark and the cleanup floor); the filler
// rows that settle holes (I2); retention's deletes (I5) — so the table's
// shape and indexes are known in one place. The one piece of SQL about it
// that leaves the package is a condition other queries embed
// (NoChangeAbove), built here from their column expressions.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package changelog
