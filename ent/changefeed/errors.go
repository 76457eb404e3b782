package changefeed

import "errors"

var (
	// ErrNotInTx rejects a desired-state mutation outside a transaction:
	// its change row could not be guaranteed to commit with it.
	ErrNotInTx = errors.New("desired-state mutations must run inside a transaction (client.Tx) so their deployment_changes rows commit with them")
	// ErrNotActualState rejects an ActualState write that touches anything
	// but the entity's actual-state fields.
	ErrNotActualState = errors.New("only actual-state fields may be written without a change row")
)
