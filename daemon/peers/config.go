package peers

import (
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config says where this replica is reached and how often it tells the
// database it is alive. Zero values take the defaults.
type Config struct {
	// AdvertiseAddr is the address other replicas dial to poke this one:
	// host:port, or a host alone for the port the gRPC server listens on
	// (see ResolveAdvertiseAddr), naming one host (see CheckAddress).
	// Empty turns peer pokes off.
	AdvertiseAddr string
	// Credentials are what pokes are dialled with (default: plaintext).
	// ctrld gives TLS ones when it serves TLS.
	Credentials credentials.TransportCredentials
	// Heartbeat is how often this replica's row is refreshed and the live
	// peers read again (default 5s): a new replica is poked by the others
	// from their next read on.
	Heartbeat time.Duration
	// PeerTTL is how old a peer's heartbeat may be before it is no longer
	// poked (default 20s, four heartbeats): a replica that died without
	// deleting its row is dialled for that long.
	PeerTTL time.Duration
	// ForgetAfter is how old a heartbeat gets before the row is deleted by
	// whichever replica notices (default 2m). A replica whose row was
	// deleted while it lived (a long pause) registers it again at its next
	// heartbeat.
	ForgetAfter time.Duration
	// PokeTimeout bounds one poke of one peer (default 1s). Operators never
	// wait for it: it only bounds how long a peer that does not answer
	// holds its one poke in flight.
	PokeTimeout time.Duration
}

// Defaults are the production settings zero Config fields take.
var Defaults = Config{
	Heartbeat:   5 * time.Second,
	PeerTTL:     20 * time.Second,
	ForgetAfter: 2 * time.Minute,
	PokeTimeout: time.Second,
}

func (c *Config) defaults() {
	if c.Credentials == nil {
		c.Credentials = insecure.NewCredentials()
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = Defaults.Heartbeat
	}
	if c.PeerTTL <= 0 {
		c.PeerTTL = Defaults.PeerTTL
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = Defaults.ForgetAfter
	}
	if c.PokeTimeout <= 0 {
		c.PokeTimeout = Defaults.PokeTimeout
	}
}
