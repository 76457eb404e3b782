// Package recovery turns a panic in one unit of work (a gRPC call, one
// resource's apply, one round of a background loop) into an error for that
// unit, so that one bad call ends that call and never the process
// (invariant I6). ctrld and agentd both use it, so a recovered panic looks
// the same in either: logged at error level with its stack, counted in the
// daemon's panics metric by where it happened, and returned as a *Panic.
//
// What happens next is the caller's decision, made where the state it
// must not trust is known: a gRPC call ends with Internal, a resource's
// apply is retried with backoff, a loop that keeps no state between rounds
// starts over (Loop), and the tailer starts over from its watermark.
//
// A goroutine's panic can only be recovered in that goroutine: every
// goroutine the daemons start runs its body under a Guard.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package recovery
