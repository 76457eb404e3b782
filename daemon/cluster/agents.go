package cluster

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/predicate"
	entregion "github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/internal/validate"
)

// Config tunes the cluster service. Zero values take the defaults.
type Config struct {
	// MaxAgentsPerRegion bounds the agent records of one region (default
	// 16). Every console reads them all each second, and an agent token
	// may name any identity, so without a bound one token could make
	// every console slow.
	MaxAgentsPerRegion int
}

// Defaults are the production settings zero Config fields take.
var Defaults = Config{
	// An HA pair needs two; each rollout of agentd's Deployment names two
	// new Pods, whose predecessors' records make room once silent for
	// agentGoneAfter. Sixteen leaves room for several rollouts at once.
	MaxAgentsPerRegion: 16,
}

func (c *Config) defaults() {
	if c.MaxAgentsPerRegion <= 0 {
		c.MaxAgentsPerRegion = Defaults.MaxAgentsPerRegion
	}
}

// agentGoneAfter is how long an agent record must be silent before a new
// identity may take its place in a full region. agentd reports every 10
// seconds, so a live agent is never silent this long unless it is cut off,
// and then its next heartbeat writes its record again whole.
const agentGoneAfter = 10 * time.Minute

// admitAgent decides whether identity may have an agent record in region,
// before a heartbeat or a stream writes one. A known identity always may.
// A new one may while the region has fewer than MaxAgentsPerRegion
// records, or by taking the place of the region's longest-silent record
// once that has been silent for agentGoneAfter; otherwise it is refused
// with ResourceExhausted.
//
// A new identity is admitted under a lock on its region's row, and its
// record is written in the same transaction: a burst of new identities
// (300 at once overshot a plain count by 24) is counted one at a time.
func (s *Service) admitAgent(ctx context.Context, region, identity string) error {
	inRegion := entagent.Region(region)
	known, err := s.client.Agent.Query().Where(inRegion, entagent.Identity(identity)).Exist(ctx)
	if err != nil {
		return internal(s.log, "admit agent", err)
	}
	if known {
		return nil
	}
	var refusal error
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		refusal = nil
		if _, err := tx.Region.Query().Where(entregion.ID(region)).ForUpdate().Only(ctx); ent.IsNotFound(err) {
			return nil // the stream answers an unknown region itself
		} else if err != nil {
			return err
		}
		// The unique index on (region, identity) answers the count.
		records, err := tx.Agent.Query().Where(inRegion).Count(ctx)
		if err != nil {
			return err
		}
		if records >= s.cfg.MaxAgentsPerRegion {
			gone := entagent.And(inRegion, silentSince(time.Now().UTC().Add(-agentGoneAfter)))
			// The identity only: Ent reads acked_cursor through a signed
			// integer, and one stored value at or above 2^63 must not
			// stop a full region from admitting.
			stalest, err := tx.Agent.Query().Where(gone).Order(ent.Asc(entagent.FieldUpdatedAt)).Limit(1).
				Select(entagent.FieldIdentity).Strings(ctx)
			if err != nil {
				return err
			}
			if len(stalest) == 0 {
				refusal = status.Errorf(codes.ResourceExhausted,
					"agent_identity: %s is new, and region %s already has %d agent records, the limit per region, none of them silent for %s; "+
						"a new identity takes the place of a record silent that long, so stop the agents that should not run (or revoke their token) and retry, or raise the limit",
					validate.Quote(identity), region, records, agentGoneAfter)
				return nil
			}
			if _, err := tx.Agent.Delete().Where(inRegion, entagent.Identity(stalest[0])).Exec(ctx); err != nil {
				return err
			}
			s.log.Info("cluster: a new agent took the place of a silent one", "region", region, "agent", identity,
				"replaced", stalest[0], "silent_for", agentGoneAfter)
		}
		return tx.Agent.Create().SetRegion(region).SetIdentity(identity).
			OnConflictColumns(entagent.FieldRegion, entagent.FieldIdentity).Ignore().Exec(ctx)
	})
	if err != nil {
		return internal(s.log, "admit agent", err)
	}
	return refusal
}

// silentSince matches the agent records nothing was heard of since cutoff:
// no heartbeat, no stream connection, no update (retention's rule for
// stale records, with a shorter time).
func silentSince(cutoff time.Time) predicate.Agent {
	return entagent.And(
		entagent.UpdatedAtLT(cutoff),
		entagent.Or(entagent.LastHeartbeatIsNil(), entagent.LastHeartbeatLT(cutoff)),
		entagent.Or(entagent.ConnectedSinceIsNil(), entagent.ConnectedSinceLT(cutoff)),
	)
}
