// Package peers lets the ctrld replicas on one database tell each other of
// their writes, so that a change committed through any replica reaches the
// agents of every replica as fast as those of the replica that wrote it. It
// owns the table ctrld_replicas (this process's row and the reading of its
// peers'), the pokes sent after a local write, and the PeerService that
// receives them.
//
// # Why
//
// Each replica's tailer (daemon/tailer) polls the change log every 100 ms.
// A write through a replica pokes that replica's own tailer, so its agents
// hear of it within milliseconds; the agents of another replica heard of it
// only at that replica's next poll: measured p50 79.6 ms against 7.0 ms.
// Behind a load balancer with N replicas, (N-1)/N of all writes paid that.
// Polling faster would multiply every replica's idle load on the database.
//
// # How
//
//   - Registration: at start a replica inserts its row (a random ID, its
//     --instance, the address peers dial, a random secret) and refreshes
//     its heartbeat every Config.Heartbeat; the same statement re-inserts
//     the row if a peer deleted it meanwhile. With each heartbeat it reads
//     the rows heard of within Config.PeerTTL: those are its peers. Rows
//     silent for Config.ForgetAfter are deleted by whichever replica
//     notices; a replica that stops deletes its own. Heartbeats are stamped
//     and aged by the database's clock, so replicas' clocks may disagree.
//     On a Galera cluster that is each node's clock (a row carries the
//     writing node's NOW), so the database hosts' clocks must agree to
//     well within PeerTTL: with more skew, peers stop poking a replica
//     (its agents then get changes at its next poll, nothing is lost), and
//     past ForgetAfter its row is deleted and written again every beat.
//     The table holds no desired or actual state and writes no change rows.
//   - Pokes: after an operator's write commits (the operator service's
//     notifier is the Replica), the replica pokes its own tailer and wakes
//     one sender per peer, and returns at once. A sender keeps at most one
//     Poke RPC in flight and at most one waiting: a burst of 1,000 writes
//     makes two RPCs per peer, not 1,000. Each RPC has a deadline
//     (Config.PokeTimeout); a peer that hangs or refuses holds only its own
//     sender, never the operator's call nor another peer's poke. A change
//     of region control (pause, forced resync) asks peers to re-read it
//     too, which they otherwise do every second.
//   - Receiving: Poke compares the secret it carries with this replica's,
//     in constant time. A match pokes the tailer (one poll, coalesced with
//     any pending); anything else is refused with Unauthenticated and
//     touches nothing: no poll, no database read, no log line (a counter).
//
// The poll stays: pokes only hasten it. A replica that is new (until its
// peers' next heartbeat read), unreachable, or misconfigured gets its
// peers' changes at its next poll, as before.
//
// # Why not a binlog reader
//
// Following the database's binary log would give every replica every
// commit without asking the writer, but it needs replication privileges,
// ties ctrld to one server's log and position (wrong for Galera, where
// each node has its own), and duplicates what the tailer already reads.
// The database stays the one thing replicas share; pokes are a hint.
//
// # Trust
//
// Poke takes no bearer token (daemon/auth lets exactly this method through
// to its own check). The caller proves it can read ctrld_replicas, i.e.
// the database, which every replica already trusts with everything. The
// secret is stored in clear because the caller must send it; it is new at
// every start. Someone who reads it can only make this replica poll the
// change log sooner, which anyone able to write the database can do
// anyway. A guesser costs one comparison per call. What a replica dials
// comes from the table too, so it dials only host:port (no scheme, socket
// file or path), and at most MaxPeers of them, however many rows there are.
// The host must name one host that can be dialled (CheckAddress): not
// 0.0.0.0 or :: (this host, to whoever dials it), multicast or broadcast,
// nor link-local (169.254.0.0/16, where clouds serve instance metadata;
// fe80::/10), nor a name that resolvers read as a number ("1.2.3",
// "0x7f.1"). ctrld refuses to start advertising such an address; a row
// holding one is skipped with a log line; and a name is checked again by
// what it resolves to, at each connection.
//
// # Transport
//
// Replicas dial each other at the advertised address (--advertise-addr),
// which must reach the process itself, not a load balancer: a poke that
// lands on another replica is refused (not its secret) and counted. When
// ctrld serves TLS, pokes use TLS too, verified with --peer-ca (default:
// the system's roots) for --peer-server-name (default: the host dialled);
// when ctrld requires client certificates, a replica presents its own
// serving certificate, which must then also allow client authentication.
//
// # Galera
//
// On a multi-primary cluster a poke may reach a replica whose node has
// certified the writer's transaction but not applied it yet. daemon/store
// opens Galera connections with wsrep_sync_wait=1, so the poll the poke
// triggers first waits until its node has applied what the cluster had
// committed, the writer's change included, instead of reading too early
// and leaving the change to the next poll.
//
// # Cost
//
// Per replica, two statements every Heartbeat (5 s): an upsert and a read
// of the few rows, plus a delete every ForgetAfter; per write, one small
// RPC per peer at most, fewer in bursts.
package peers
