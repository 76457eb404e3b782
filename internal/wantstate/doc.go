// Package wantstate reads, for the checkers (internal/feedcheck,
// internal/convergecheck), what every region should run according to the
// database: running topologies with the spec each region runs, running
// sentinels, and policies. It reads the rows itself, in one snapshot, and
// shares nothing with the stream's event builders, so a checker built on
// it can catch a mistake there.
package wantstate
