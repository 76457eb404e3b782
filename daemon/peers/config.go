package peers

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config says where this replica is reached and how often it tells the
// database it is alive. Zero values take the defaults.
type Config struct {
	// AdvertiseAddr is the address other replicas dial to poke this one:
	// host:port, or a host alone for the port the gRPC server listens on
	// (see ResolveAdvertiseAddr). Empty turns peer pokes off.
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

// ResolveAdvertiseAddr returns the address peers dial, from the advertised
// one and the address the gRPC server actually listens on: a host alone
// (an IP, IPv6 without brackets too, or a name) takes the listener's port.
// Anything else that is not host:port with a port of 1-65535 is an error.
func ResolveAdvertiseAddr(advertise, listening string) (string, error) {
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		// No port: the host alone (an IPv6 address with or without
		// brackets).
		host, port = advertise, ""
		if inner, ok := strings.CutPrefix(advertise, "["); ok {
			host, ok = strings.CutSuffix(inner, "]")
			if !ok || net.ParseIP(host) == nil {
				return "", fmt.Errorf("advertise address %q: brackets hold an IPv6 address, [fd00::1] or [fd00::1]:7070", advertise)
			}
		}
	}
	if host == "" || !validHost(host) {
		return "", fmt.Errorf("advertise address %q: want host or host:port, the host an IP address or a DNS name that peers can dial (e.g. the pod's IP)", advertise)
	}
	if port == "" {
		_, port, err = net.SplitHostPort(listening)
		if err != nil {
			return "", fmt.Errorf("listen address %q: %w", listening, err)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("advertise address %q: port %q is not 1-65535", advertise, port)
	}
	return net.JoinHostPort(host, port), nil
}

// validHost accepts IP addresses and DNS names: letters, digits, '-', '.',
// and ':' for IPv6. Nothing that would change what a dial means (spaces,
// '/', '@', brackets) gets into the registry.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
		default:
			return false
		}
	}
	return true
}

// validPeerAddr accepts what ResolveAdvertiseAddr returns: host:port, the
// host an IP address or a DNS name, the port 1-65535.
func validPeerAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !validHost(host) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
