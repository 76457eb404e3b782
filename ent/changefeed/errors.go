package changefeed

import "errors"

var (
	// ErrNotInTx rejects a desired-state mutation outside a transaction:
	// its change row could not be guaranteed to commit with it.
	ErrNotInTx = errors.New("desired-state mutations must run inside a transaction (client.Tx) so their deployment_changes rows commit with them")
	// ErrNotActualState rejects an ActualState write that touches anything
	// but the entity's actual-state fields.
	ErrNotActualState = errors.New("only actual-state fields may be written without a change row")
	// ErrIDInUse rejects a create or upsert whose ID belongs to another
	// row: MySQL's upsert would have updated that row (the primary key
	// collides first) while the change row named the natural key's.
	ErrIDInUse = errors.New("the ID belongs to another row")
	// ErrEdgeThroughParent rejects a deployment mutation that adds, removes
	// or clears its topologies or policies: Ent would rewrite those rows'
	// foreign keys directly, past their own hooks and without change rows.
	ErrEdgeThroughParent = errors.New("a deployment's topologies and policies change through their own mutations, which write their change rows, not through the deployment's edges")
)
