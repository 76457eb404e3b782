package dial

import (
	"net"
	"net/netip"
	"strings"
)

// Loopback reports whether address reaches this machine only, so that
// plaintext to it (or a listener on it) never crosses a network. It takes a
// listen address or a gRPC target, with or without a port:
//
//   - a literal loopback IP (127.0.0.0/8, ::1) or the name "localhost" is
//     loopback, also behind gRPC's "dns:///" or "passthrough:///"; behind
//     "dns://SERVER/" only the IP is, since that server, not this machine,
//     would say where "localhost" is;
//   - a unix socket target ("unix:", "unix-abstract:") is loopback;
//   - an empty host (":7070", every interface), 0.0.0.0, :: and every other
//     IP or name is not.
//
// Names other than "localhost" are not resolved: what a name resolves to
// can change after the check, and a name that resolves to loopback here is
// a habit that fails on the next machine. Write the IP instead.
func Loopback(address string) bool {
	namedServer := false
	for _, scheme := range []string{"dns:", "passthrough:"} {
		if rest, ok := strings.CutPrefix(address, scheme); ok {
			if rest, ok = strings.CutPrefix(rest, "//"); ok {
				var authority string
				authority, rest, _ = strings.Cut(rest, "/") // the authority names a DNS server
				namedServer = authority != ""
			}
			address = rest
		}
	}
	if strings.HasPrefix(address, "unix:") || strings.HasPrefix(address, "unix-abstract:") {
		return true
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address // no port: gRPC's default port
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return !namedServer
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
