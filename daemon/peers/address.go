package peers

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// ResolveAdvertiseAddr returns the address peers dial, from the advertised
// one and the address the gRPC server actually listens on: a host alone
// (an IP, IPv6 without brackets too, or a name) takes the listener's port.
// The result must pass CheckAddress. An error starts with the advertised
// address, quoted, for the caller to say what it is (a flag, a field).
func ResolveAdvertiseAddr(advertise, listening string) (string, error) {
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		// No port: the host alone (an IPv6 address with or without
		// brackets).
		host, port = advertise, ""
		if inner, ok := strings.CutPrefix(advertise, "["); ok {
			host, ok = strings.CutSuffix(inner, "]")
			if !ok || net.ParseIP(host) == nil {
				return "", fmt.Errorf("%q: brackets hold an IPv6 address, [fd00::1] or [fd00::1]:7070", advertise)
			}
		}
	}
	if port == "" && host != "" {
		_, port, err = net.SplitHostPort(listening)
		if err != nil {
			return "", fmt.Errorf("%q has no port, and the listen address %q none to take: %w", advertise, listening, err)
		}
	}
	addr := net.JoinHostPort(host, port)
	if err := CheckAddress(addr); err != nil {
		return "", fmt.Errorf("%q: %w", advertise, err)
	}
	return addr, nil
}

// CheckAddress checks an address replicas dial each other at: host:port,
// the port 1-65535, the host a DNS name or an IP address that names one
// host that can be dialled. So not 0.0.0.0 or :: (each means "this host"
// to whoever dials it: every replica would poke itself), not a multicast
// or broadcast address, not a link-local one (169.254.0.0/16, where
// clouds serve instance metadata at 169.254.169.254, or fe80::/10, which
// needs a zone and means another host on each machine), and no name that
// looks like a number ("1.2.3", "0x7f.1", "2130706433"): resolvers read
// those as IPv4 addresses in forms that hide which. Loopback is allowed:
// replicas on one machine, as in tests. ctrld refuses to start with an
// --advertise-addr that fails, and a replica skips a peer's row that fails
// (only someone writing the table by hand could add one); a name is
// checked again by what it resolves to, when it is dialled.
func CheckAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return checkIP(ip)
	}
	return checkName(host)
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its last 32 bits are
// an IPv4 address that a NAT64 gateway dials.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// checkIP accepts an IP address that names one host to dial (see
// CheckAddress).
func checkIP(ip netip.Addr) error {
	if ip.Zone() != "" {
		return fmt.Errorf("%s has a zone: link-local addresses are not dialled, give the replica's routable address", ip)
	}
	ip = ip.Unmap() // ::ffff:169.254.169.254 is 169.254.169.254
	if nat64.Contains(ip) {
		// 64:ff9b::a9fe:a9fe reaches 169.254.169.254 through a NAT64
		// gateway: judge the IPv4 address it carries.
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case ip.IsUnspecified(), ip.Is4() && ip.As4()[0] == 0:
		return fmt.Errorf("%s is no one host's address (it means \"this host\" to whoever dials it); give the replica's own address, e.g. the pod's IP", ip)
	case ip.IsMulticast(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is a multicast or broadcast address, not one host's", ip)
	case ip.IsLinkLocalUnicast():
		return fmt.Errorf("%s is link-local (169.254.0.0/16, fe80::/10: where clouds serve instance metadata, and not routed); give the replica's routable address", ip)
	}
	return nil
}

// checkName accepts a DNS name: dot-separated labels of 1-63 letters,
// digits, '-' and '_' (an optional trailing dot), at most 253 characters,
// and not ending in a numeric label. Nothing that would change what a
// dial means (spaces, '/', '@', ':', brackets) gets into the registry.
func checkName(name string) error {
	want := "want an IP address or a DNS name that peers can dial (e.g. the pod's IP)"
	if name == "" {
		return fmt.Errorf("no host; %s", want)
	}
	if len(name) > 253 {
		return fmt.Errorf("host is %d characters long, at most 253 allowed", len(name))
	}
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 || strings.ContainsFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name (dot-separated labels of 1-63 letters, digits, '-' and '_'); %s", name, want)
		}
	}
	// The URL standard's rule (a host "ends in a number"), which is what
	// inet_aton and so the C resolver read as an IPv4 address: a last
	// label of decimal digits, or 0x and hex digits. No top-level domain
	// is one.
	last := labels[len(labels)-1]
	hex, isHex := strings.CutPrefix(strings.ToLower(last), "0x")
	if !isHex {
		hex = last
	}
	digits := "0123456789"
	if isHex {
		digits += "abcdef"
	}
	if strings.Trim(hex, digits) == "" {
		return fmt.Errorf("host %q looks like a number, which resolvers read as an IPv4 address (\"127.1\" is 127.0.0.1, \"0x7f.1\" too); give the address as a.b.c.d, or a DNS name", name)
	}
	return nil
}

// checkDialled refuses a connection to an address CheckAddress would
// refuse, once a name is resolved: the name was fine, what it points to
// may not be (a record for 169.254.169.254, say). It runs before each
// connection attempt (net.Dialer's ControlContext).
func checkDialled(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialled address %q: %w", address, err)
	}
	if err := checkIP(ap.Addr()); err != nil {
		return fmt.Errorf("refusing to dial %s: %w", address, err)
	}
	return nil
}

// dialPeer dials a peer's host:port over TCP, resolving a name as the
// default dialer does, and refuses what checkDialled refuses.
func dialPeer(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{ControlContext: checkDialled}
	return d.DialContext(ctx, "tcp", addr)
}
