// Package desired is the write side of desired state: the few operations
// that change what agents must run (deploy, start/stop, scale, sentinels,
// Cilium policies), each one transaction. The change rows themselves are
// written by the Ent hooks in ent/changefeed, so nothing here can forget
// them; this package owns the rules about what a valid change is (known
// regions, existing resources) and turns them into clear errors.
package desired
