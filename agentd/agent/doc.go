// Package agent assembles agentd: the informer cache, the controllers (one
// per kind, from reconcile's registry: the agent names no kind), the
// dispatcher, the watcher, status and resource sync reporting, and the
// heartbeat that tells ctrld the acknowledged cursor and why the last full
// sync did not complete; and, with leader election, makes sure only one
// replica per cluster applies anything.
package agent
