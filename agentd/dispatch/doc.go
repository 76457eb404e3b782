// Package dispatch applies stream events through a per-resource work
// queue and decides how far the agent's cursor may advance.
//
// Events are keyed by resource (kind and ID). Only the latest intent per
// key is kept, and client-go's work queue never hands one key to two
// workers at once: an Apply followed quickly by a Delete of the same
// deployment can only end deleted, and no two applies of one resource race.
// Different resources are applied in parallel by a bounded set of workers.
//
// The cursor is acknowledged only past work that is done: a bookmark from
// the stream counts once every event received before it has been applied
// successfully, refused for good by the agent's own rules (Terminal), or
// superseded by a later event for the same resource. A
// superseded event stops holding bookmarks as soon as the later one is
// received, applied or not: the later event comes after those bookmarks in
// the stream, so a resume from any of them receives it again. Not so
// during a full sync: it re-sends every resource whatever its version, so
// an event it sends for a resource does not release the bookmarks before
// the sync that the resource's unapplied event holds; they wait for that
// resource's apply (which the sync's own bookmark waits for anyway). A
// failing apply is retried with the queue's exponential backoff and holds
// the cursor meanwhile; other resources go on. A refused one (Terminal)
// holds nothing and is not retried with that backoff; it stays failing
// until an apply of it succeeds, and is tried again after a long delay
// (RefusedRetryMin, backing off to RefusedRetryMax), so that a person's fix
// (labeling the namespace) takes effect without waiting for the next
// change or full sync.
//
// Per resource it also keeps what ctrld is told of it (Syncs): the version
// last applied, whether the newest intent is applied, and a failing
// apply's error and since when. Receiving, applying and failing only mark
// the resource for the next report (a map write under the lock the apply
// path holds anyway); the reporter builds the report, and a resource whose
// state ends as ctrld last took it is not reported again.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package dispatch
