package cluster

import (
	"time"

	"github.com/deploysync/deploysync/daemon/liveview"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/predicate"
)

// Config tunes the cluster service. Zero values take the defaults.
type Config struct {
	// MaxAgentsPerRegion bounds the agent records of one region (default
	// 16). Every console reads them all each second, and an agent token
	// may name any identity, so without a bound one token could make
	// every console slow. The bound is per region, and a region is one
	// cluster (its agent pair, and their rollouts: region health speaks
	// for a region through one agent), so it does not limit the agents
	// of a ctrld: 10,000 agents are 10,000 regions, each with places of
	// its own. Raised, it would only let one leaked token add that many
	// records more.
	MaxAgentsPerRegion int
	// Reported, when set, is called after a report of deployments'
	// instances or applies, or a heartbeat, is stored: the rollout driver then looks at
	// once rather than at its next tick, so a gate that passed promotes
	// the next wave in milliseconds.
	Reported func()
	// Live relays live views between agents and the people asking; nil:
	// agents' live-view calls are refused (Unimplemented).
	Live *liveview.Hub
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
// identity may take its place in a full region. agentd reports every 2
// seconds, so a live agent is never silent this long unless it is cut off,
// and then its next heartbeat writes its record again whole.
const agentGoneAfter = 10 * time.Minute

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
