package peers

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// Peer addresses are one host's host:port: what is not (this host, every
// host, a link-local metadata server, a name that is a number in
// disguise, no port) is refused, saying why.
func TestCheckAddress(t *testing.T) {
	for _, good := range []string{
		"10.0.0.5:7070", "192.168.1.20:1", "203.0.113.7:65535", "[fd00::1]:7070", "[2001:db8::5]:7070",
		"127.0.0.1:7070", "[::1]:7070", "localhost:7070", // one machine: tests, a developer's replicas
		"ctrld-0.ctrld.deploysync.svc:7070", "ctrld-0.ctrld.deploysync.svc.:7070", "CTRLD.example.com:7070",
		"host_1.example:7070", "1host.example:7070", "a1.b2.c3d:7070",
		"[64:ff9b::a00:1]:7070", // NAT64 to 10.0.0.1
	} {
		if err := CheckAddress(good); err != nil {
			t.Errorf("CheckAddress(%q) = %v, want ok", good, err)
		}
	}
	for _, c := range []struct{ addr, why string }{
		{"0.0.0.0:7070", "no one host's"},
		{"0.1.2.3:7070", "no one host's"},
		{"[::]:7070", "no one host's"},
		{"[::ffff:0.0.0.0]:7070", "no one host's"},
		{"169.254.169.254:80", "link-local"},
		{"169.254.0.1:7070", "link-local"},
		{"[::ffff:169.254.169.254]:80", "link-local"},
		{"[64:ff9b::a9fe:a9fe]:80", "link-local"}, // NAT64 to 169.254.169.254
		{"[fe80::1]:7070", "link-local"},
		{"[fe80::1%eth0]:7070", "zone"},
		{"224.0.0.1:7070", "multicast"},
		{"239.1.2.3:7070", "multicast"},
		{"[ff02::1]:7070", "multicast"},
		{"255.255.255.255:7070", "broadcast"},
		{"1.2.3:7070", "looks like a number"},
		{"0x7f.1:7070", "looks like a number"},
		{"127.1:7070", "looks like a number"},
		{"2130706433:7070", "looks like a number"},
		{"0x7f000001:7070", "looks like a number"},
		{"0177.0.0.1:7070", "looks like a number"},
		{"010.0.0.1:7070", "looks like a number"},
		{"1.2.3.4.5:7070", "looks like a number"},
		{"example.com.0X1F:7070", "looks like a number"},
		{"example.0x:7070", "looks like a number"},
		{"10.0.0.5", "not host:port"},
		{"example.com", "not host:port"},
		{"[fd00::1]", "not host:port"},
		{"10.0.0.5:", "port"},
		{"10.0.0.5:0", "port"},
		{"10.0.0.5:65536", "port"},
		{"10.0.0.5:+80", "port"},
		{"10.0.0.5:http", "port"},
		{":7070", "no host"},
		{"a b:7070", "DNS name"},
		{"user@host:7070", "DNS name"},
		{"host/path:7070", "DNS name"},
		{"a..b:7070", "DNS name"},
		{strings.Repeat("a", 64) + ".example:7070", "DNS name"},
		{strings.Repeat("a.", 127) + "bb:7070", "at most 253"},
	} {
		err := CheckAddress(c.addr)
		if err == nil {
			t.Errorf("CheckAddress(%q) accepted, want refused (%s)", c.addr, c.why)
		} else if !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckAddress(%q) = %v; want it to say %q", c.addr, err, c.why)
		}
	}
}

// A peer is dialled only at an address that passes the check once
// resolved: what a name points to counts, not the name, and the check
// runs at connect time, before any packet. Shown with 0.0.0.0 and ::,
// which reach this test's own listener when not refused (a link-local
// address would reach whatever answers there).
func TestPeersAreDialledOnlyAtOneHostsAddress(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	conn, err := dialPeer(ctx, net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dialling localhost: %v", err)
	}
	conn.Close()
	for _, addr := range []string{"0.0.0.0:" + port, "[::]:" + port} {
		if conn, err := dialPeer(ctx, addr); err == nil {
			conn.Close()
			t.Errorf("dialled %s, want it refused", addr)
		} else if !strings.Contains(err.Error(), "refusing to dial") {
			t.Errorf("dialling %s: %v, want the check's refusal", addr, err)
		}
	}
}
