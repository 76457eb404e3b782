package dial_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/limits"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func TestLoopback(t *testing.T) {
	for address, want := range map[string]bool{
		"127.0.0.1:7070":             true,
		"127.1.2.3:7070":             true,
		"[::1]:7070":                 true,
		"::1":                        true,
		"[::ffff:127.0.0.1]:7070":    true,
		"localhost:7070":             true,
		"LocalHost:7070":             true,
		"localhost":                  true,
		"dns:///localhost:7070":      true,
		"dns://8.8.8.8/127.0.0.1:70": true,
		"passthrough:///[::1]:7070":  true,
		"unix:///run/ctrld.sock":     true,
		"unix-abstract:ctrld":        true,

		":7070":                          false, // every interface
		"0.0.0.0:7070":                   false,
		"[::]:7070":                      false,
		"10.0.0.5:7070":                  false,
		"ctrld.deploysync.example:7070":  false,
		"dns:///ctrld.example:7070":      false,
		"localhost.attacker.example:443": false,
		"dns://8.8.8.8/localhost:7070":   false, // that server says where localhost is
		"127.0.0.1.nip.io:7070":          false, // a name, not resolved
		"":                               false,
	} {
		if got := dial.Loopback(address); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", address, got, want)
		}
	}
}

// --insecure to an address off this machine is refused before anything is
// sent, unless the caller also set the explicit override.
func TestInsecureOnlyToLoopbackUnlessOverridden(t *testing.T) {
	for _, c := range []struct {
		o       dial.Options
		refused bool
	}{
		{dial.Options{Address: "ctrld.example:7070", Insecure: true}, true},
		{dial.Options{Address: ":7070", Insecure: true}, true},
		{dial.Options{Address: "10.0.0.5:7070", Insecure: true}, true},
		{dial.Options{Address: "10.0.0.5:7070", Insecure: true, InsecureNonLoopback: true}, false},
		{dial.Options{Address: "127.0.0.1:7070", Insecure: true}, false},
		{dial.Options{Address: "localhost:7070", Insecure: true}, false},
		{dial.Options{Address: "ctrld.example:7070"}, false}, // TLS
	} {
		c.o.Token = "t"
		conn, err := dial.Ctrld(c.o)
		if c.refused {
			if !errors.Is(err, dial.ErrPlaintextNonLoopback) || !strings.Contains(err.Error(), c.o.Address) || !strings.Contains(err.Error(), "--insecure-non-loopback") {
				t.Errorf("%+v: got %v, want a refusal naming the address and the override", c.o, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", c.o, err)
			continue
		}
		conn.Close()
	}
	if _, err := dial.Ctrld(dial.Options{Address: "ctrld.example:7070", InsecureNonLoopback: true}); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("the override without --insecure: got %v, want an error saying it needs --insecure", err)
	}
}

// bigRegion answers ListRegions with one region whose last error is n bytes.
type bigRegion struct {
	ctrlv1.UnimplementedOperatorServiceServer
	n int
}

func (b *bigRegion) ListRegions(context.Context, *ctrlv1.ListRegionsRequest) (*ctrlv1.ListRegionsResponse, error) {
	return &ctrlv1.ListRegionsResponse{Regions: []*ctrlv1.RegionOverview{{Region: "eu", LastError: strings.Repeat("x", b.n)}}}, nil
}

// A client receives every message up to limits.MaxMessageBytes, the most
// ctrld sends, and refuses larger ones: the two sides agree by
// construction, so nothing ctrld sends is a poison message to its clients.
func TestClientsReceiveUpToTheMessageLimit(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	answer := &bigRegion{}
	srv := grpc.NewServer() // sends up to math.MaxInt32 by default
	ctrlv1.RegisterOperatorServiceServer(srv, answer)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	conn, err := dial.Ctrld(dial.Options{Address: lis.Addr().String(), Token: "t", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op := ctrlv1.NewOperatorServiceClient(conn)
	const framing = 64 // the response's and region's own fields around the text
	answer.n = limits.MaxMessageBytes - framing
	r, err := op.ListRegions(t.Context(), &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatalf("a message just under the limit of %d bytes: %v", limits.MaxMessageBytes, err)
	}
	if got := len(r.Regions[0].LastError); got != answer.n {
		t.Fatalf("received %d bytes of text, want %d", got, answer.n)
	}
	answer.n = limits.MaxMessageBytes + 1
	if _, err := op.ListRegions(t.Context(), &ctrlv1.ListRegionsRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over the limit: got %v, want ResourceExhausted", err)
	}
}

// After a long outage, a client finds ctrld again within a few seconds of
// its return, not after gRPC's default backoff (which grows to two
// minutes: at 30 s of outage the next attempt may be 20 s away).
func TestClientsFindCtrldSoonAfterALongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 30 s outage; the full suite (CI) runs it")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // ctrld is down

	conn, err := dial.Ctrld(dial.Options{Address: addr, Token: "t", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op := ctrlv1.NewOperatorServiceClient(conn)
	outage := time.Now().Add(30 * time.Second)
	for time.Now().Before(outage) { // a console refreshing every second meanwhile
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		cancel()
		time.Sleep(time.Second)
	}

	lis, err = net.Listen("tcp", addr) // ctrld is back
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	ctrlv1.RegisterOperatorServiceServer(srv, &bigRegion{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	// The longest wait is the capped backoff with its jitter, and a
	// second of slack for the attempt itself.
	ctx, cancel := context.WithTimeout(t.Context(), 7*time.Second)
	defer cancel()
	if _, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("ctrld is back, yet the client did not reach it within 7 s: %v", err)
	}
}
