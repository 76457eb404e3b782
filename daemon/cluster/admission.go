package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/ent"
	entagent "github.com/deploysync/deploysync/ent/agent"
	entregion "github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/internal/validate"
)

// Admission batches: at most maxAdmissionBatch new identities of a region
// are decided in one transaction, which may take admissionTimeout.
const (
	maxAdmissionBatch = 500
	admissionTimeout  = 30 * time.Second
)

// connection is a stream's hold on its agent's record: which ctrld process
// serves it, since when.
type connection struct {
	to    string
	since time.Time
}

// admission is one new identity waiting to be decided.
type admission struct {
	ctx      context.Context // the caller's: one that gave up before its batch is skipped
	identity string
	conn     *connection // a stream's; nil for a heartbeat
	result   chan error  // capacity 1
}

// admissions are the new identities waiting, per region. One goroutine per
// region with some waiting decides them, in batches.
type admissions struct {
	mu      sync.Mutex
	waiting map[string][]*admission
}

// admitAgent decides whether identity may have an agent record in region,
// and writes it, with conn if it is a stream's (nil for a heartbeat).
// Heartbeats and streams call it when they found no record to update: a
// known identity's heartbeat or stream start is one UPDATE, which takes no
// lock. A new identity may have a record while the region has fewer than
// MaxAgentsPerRegion, or by taking the place of the region's longest-silent
// record once that has been silent for agentGoneAfter; otherwise it is
// refused with ResourceExhausted. A region that is not registered gets
// stream.ErrUnknownRegion.
//
// New identities are counted under a lock on their region's row, and their
// records written in the same transaction: a burst of them (300 at once
// overshot a plain count by 24) cannot leave the region over its bound.
// One statement cannot do that in InnoDB: an INSERT ... SELECT counts under
// shared locks (a FOR UPDATE in it is not honoured), so admissions that
// arrive together deadlock (194 of 200 at once did, on MariaDB 10.11). One
// transaction per identity, each waiting for the last to commit, took 3 s
// for a burst of 1,000 in one region; so the identities that wait meanwhile
// are decided together, in the next transaction (admitBatch). Regions do
// not wait for each other.
func (s *Service) admitAgent(ctx context.Context, region, identity string, conn *connection) error {
	a := &admission{ctx: ctx, identity: identity, conn: conn, result: make(chan error, 1)}
	s.admissions.mu.Lock()
	if s.admissions.waiting == nil {
		s.admissions.waiting = map[string][]*admission{}
	}
	waiting, deciding := s.admissions.waiting[region]
	s.admissions.waiting[region] = append(waiting, a)
	s.admissions.mu.Unlock()
	if !deciding {
		go s.decideAdmissions(region)
	}
	// However long the caller waits, it learns whether its record was
	// written (a stream that went away clears its connection then): a
	// batch lasts at most admissionTimeout.
	return <-a.result
}

// decideAdmissions decides region's waiting admissions, a batch per
// transaction, until none waits. The region's entry in waiting exists for
// as long as it runs, so that only one runs per region.
func (s *Service) decideAdmissions(region string) {
	guard := recovery.Guard{Log: s.log}
	for {
		s.admissions.mu.Lock()
		waiting := s.admissions.waiting[region]
		if len(waiting) == 0 {
			delete(s.admissions.waiting, region)
			s.admissions.mu.Unlock()
			return
		}
		n := min(len(waiting), maxAdmissionBatch)
		batch := waiting[:n:n]
		s.admissions.waiting[region] = waiting[n:]
		s.admissions.mu.Unlock()

		// Callers that gave up before their batch began are not admitted.
		batch = slices.DeleteFunc(batch, func(a *admission) bool {
			if err := a.ctx.Err(); err != nil {
				a.result <- status.FromContextError(err).Err()
				return true
			}
			return false
		})
		var results []error
		err := guard.Run("agent-admission", func() (err error) {
			results, err = s.admitBatch(region, batch)
			return err
		})
		if err != nil {
			err = internal(s.log, "admit agent", fmt.Errorf("%d identities in region %s: %w", len(batch), region, err))
		}
		for i, a := range batch {
			if err != nil {
				a.result <- err
			} else {
				a.result <- results[i]
			}
		}
	}
}

// admitBatch decides batch in one transaction, in order, and returns each
// one's refusal (nil: admitted, its record written).
func (s *Service) admitBatch(region string, batch []*admission) ([]error, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	// Not a caller's context: the batch is every waiting caller's.
	ctx, cancel := context.WithTimeout(context.Background(), admissionTimeout)
	defer cancel()
	var refusals []error
	err := store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		refusals = make([]error, len(batch))
		if _, err := tx.Region.Query().Where(entregion.ID(region)).ForUpdate().Only(ctx); ent.IsNotFound(err) {
			for i := range refusals {
				refusals[i] = fmt.Errorf("%w %q", stream.ErrUnknownRegion, region)
			}
			return nil
		} else if err != nil {
			return err
		}
		// On a Galera cluster the lock above holds on this node only, and
		// another node's admission could count the same free places.
		// Written, the region row makes two such batches collide when
		// they are certified: the later one is rerun (store.WithTx) and
		// counts again, the other's records included. On one server it
		// changes nothing the lock has not already settled.
		if err := tx.Region.UpdateOneID(region).Exec(ctx); err != nil {
			return err
		}
		// The unique index on (region, identity) answers the count.
		records, err := tx.Agent.Query().Where(entagent.Region(region)).Count(ctx)
		if err != nil {
			return err
		}
		// Records written since the callers looked (by an identity's
		// other stream, say) keep their places; an identity twice in the
		// batch takes one. Read only when places may run short.
		known := map[string]bool{}
		if records+len(batch) > s.cfg.MaxAgentsPerRegion {
			identities := make([]string, len(batch))
			for i, a := range batch {
				identities[i] = a.identity
			}
			found, err := tx.Agent.Query().Where(entagent.Region(region), entagent.IdentityIn(identities...)).
				Select(entagent.FieldIdentity).Strings(ctx)
			if err != nil {
				return err
			}
			for _, id := range found {
				known[id] = true
			}
		}
		var heartbeats, streams []*ent.AgentCreate
		for i, a := range batch {
			if !known[a.identity] {
				if records >= s.cfg.MaxAgentsPerRegion {
					if refusals[i], err = s.makeRoom(ctx, tx, region, a.identity, records); err != nil {
						return err
					}
					if refusals[i] != nil {
						continue
					}
				} else {
					records++
				}
				known[a.identity] = true
			}
			create := tx.Agent.Create().SetRegion(region).SetIdentity(a.identity)
			if a.conn == nil {
				heartbeats = append(heartbeats, create)
			} else {
				streams = append(streams, create.SetConnectedTo(a.conn.to).SetConnectedSince(a.conn.since))
			}
		}
		if len(heartbeats) > 0 {
			// A record written meanwhile is kept as it is; the heartbeat's
			// update then finds it.
			err := tx.Agent.CreateBulk(heartbeats...).
				OnConflictColumns(entagent.FieldRegion, entagent.FieldIdentity).Ignore().Exec(ctx)
			if err != nil {
				return err
			}
		}
		if len(streams) > 0 {
			// The stream's connection, whatever another stream of the
			// identity wrote meanwhile: the newer stream holds the record.
			return tx.Agent.CreateBulk(streams...).
				OnConflictColumns(entagent.FieldRegion, entagent.FieldIdentity).
				Update(func(u *ent.AgentUpsert) { u.UpdateConnectedTo().UpdateConnectedSince().UpdateUpdatedAt() }).
				Exec(ctx)
		}
		return nil
	})
	return refusals, err
}

// makeRoom deletes the region's longest-silent record, if one has been
// silent for agentGoneAfter, to make room for identity in a full region
// (records records); otherwise it returns the ResourceExhausted refusal.
func (s *Service) makeRoom(ctx context.Context, tx *ent.Tx, region, identity string, records int) (refusal, err error) {
	gone := entagent.And(entagent.Region(region), silentSince(time.Now().UTC().Add(-agentGoneAfter)))
	// The identity only: Ent reads acked_cursor through a signed integer,
	// and one stored value at or above 2^63 must not stop a full region
	// from admitting. A locking read: it sees the records as they are now,
	// not as the transaction's snapshot had them, and holds the one it
	// picks. A known agent's stream start updates its record without the
	// region's lock, so a record silent in the snapshot may have come
	// back to life since; deleting it would take a live agent's place.
	stalest, err := tx.Agent.Query().Where(gone).Order(ent.Asc(entagent.FieldUpdatedAt)).Limit(1).
		ForUpdate().Select(entagent.FieldIdentity).Strings(ctx)
	if err != nil {
		return nil, err
	}
	if len(stalest) == 0 {
		return status.Errorf(codes.ResourceExhausted,
			"agent_identity: %s is new, and region %s already has %d agent records, the limit per region, none of them silent for %s; "+
				"a new identity takes the place of a record silent that long, so stop the agents that should not run (or revoke their token) and retry, or raise the limit",
			validate.Quote(identity), region, records, agentGoneAfter), nil
	}
	if _, err := tx.Agent.Delete().Where(entagent.Region(region), entagent.Identity(stalest[0])).Exec(ctx); err != nil {
		return nil, err
	}
	s.log.Info("cluster: a new agent took the place of a silent one", "region", region, "agent", identity,
		"replaced", stalest[0], "silent_for", agentGoneAfter)
	return nil, nil
}
