package desired

import "errors"

var (
	// ErrUnknownRegion: the region has no registered agent token or entry.
	ErrUnknownRegion = errors.New("unknown region")
	// ErrNotFound: the deployment, topology, sentinel or policy does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a deployment with that ID exists already.
	ErrAlreadyExists = errors.New("already exists")
	// ErrInvalid: a value breaks a rule the schema cannot express.
	ErrInvalid = errors.New("invalid")
	// ErrConflict: the request is well-formed but contradicts state that
	// exists already (a sentinel of another workspace, a policy's owner
	// changing); retrying the same request cannot succeed.
	ErrConflict = errors.New("conflicts with existing state")
	// ErrNothingToRollBack: a rollback has no earlier revision to restore,
	// or the one asked for is what runs already.
	ErrNothingToRollBack = errors.New("nothing to roll back")
	// ErrConcurrentChange: another action changed the same deployment at
	// the same time; the same request can succeed when retried.
	ErrConcurrentChange = errors.New("changed concurrently; retry")
	// ErrRolloutMoved: an action confirmed on a rollout (RolloutFence)
	// found another one in flight, none, or the same one at another wave
	// or version; nothing was done. Retrying the same request cannot
	// succeed: the person looks again and decides again.
	ErrRolloutMoved = errors.New("not the rollout you confirmed")
)
