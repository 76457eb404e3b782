// Package liveview relays live views (a deployment's pods, events and
// logs in one region) from the region's agent to the person asking, on
// connections the agent opened: ctrld never dials into a cluster.
//
// It owns one replica's share of that traffic (Hub): the agents connected
// to it with a LiveRequests stream open, the requests waiting for their
// answers, and the bounds on both. A request goes down the agent's
// stream; the agent answers on a LiveAnswer call of its own, on the same
// connection, so each answer has its own flow control: a person who reads
// slowly slows only their own answer (the agent's Send blocks, and it
// reads its logs no faster), never another's, nor the watch stream. When
// the region's agent is connected to another replica, Remote asks it
// there (daemon/peers).
//
// What the agent serves is the agent's to decide (agentd/liveview); who
// may ask for what, and the audit, are the operator service's
// (daemon/operator).
package liveview
