package peers

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// countingTailer stands in for this process's tailer, which only counts.
type countingTailer struct{ pokes, refreshes atomic.Int64 }

func (c *countingTailer) Poke()                                { c.pokes.Add(1) }
func (c *countingTailer) RefreshControl(context.Context) error { c.refreshes.Add(1); return nil }

// heldPeer is a real PeerService whose first poke is held until released.
type heldPeer struct {
	ctrlv1.UnimplementedPeerServiceServer
	arrived chan struct{} // one per poke, when it arrives
	release chan struct{} // closed to let the held poke return

	mu       sync.Mutex
	requests []*ctrlv1.PokeRequest
}

func (h *heldPeer) Poke(ctx context.Context, req *ctrlv1.PokeRequest) (*ctrlv1.PokeResponse, error) {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	h.mu.Unlock()
	h.arrived <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return &ctrlv1.PokeResponse{}, nil
}

func (h *heldPeer) received() []*ctrlv1.PokeRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*ctrlv1.PokeRequest(nil), h.requests...)
}

func serveHeldPeer(t *testing.T) (*heldPeer, string) {
	t.Helper()
	h := &heldPeer{arrived: make(chan struct{}, 10000), release: make(chan struct{})}
	srv := grpc.NewServer()
	ctrlv1.RegisterPeerServiceServer(srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return h, lis.Addr().String()
}

func newTestReplica(t *testing.T, local Tailer) *Replica {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	r, err := New(nil, "127.0.0.1:1", "test", Config{PokeTimeout: time.Hour}, local, prometheus.NewRegistry(), recovery.Guard{Log: log}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.follow(nil) })
	return r
}

// A burst of writes makes one poke in flight per peer and one more after
// it, whatever the burst's size; the one after it carries the burst's news
// (here: a region's control changed).
func TestABurstOfWritesMakesTwoPokesPerPeer(t *testing.T) {
	peer, addr := serveHeldPeer(t)
	local := &countingTailer{}
	r := newTestReplica(t, local)
	r.follow([]*ent.CtrldReplica{{ID: "held", Address: addr, Secret: "its-secret"}})

	r.Poke()
	<-peer.arrived // the first poke is in flight, and held
	const burst = 1000
	for i := range burst - 1 {
		if i == burst/2 {
			if err := r.RefreshControl(context.Background()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		r.Poke()
	}
	close(peer.release)
	<-peer.arrived // the one pending poke
	eventually.True(t, 30*time.Second, "the pending poke never completed", func() bool {
		return testutil.ToFloat64(r.metrics.sent.WithLabelValues("ok")) >= 2
	})
	// Both pokes are done and nothing is pending: no third can come.
	if n := len(r.peers["held"].pending); n != 0 {
		t.Fatalf("%d pokes pending after the burst", n)
	}
	got := peer.received()
	if len(got) != 2 {
		t.Fatalf("%d writes made %d pokes of one peer, want 2", burst, len(got))
	}
	if got[0].GetSecret() != "its-secret" || got[1].GetSecret() != "its-secret" {
		t.Error("a poke did not carry the peer's secret")
	}
	if got[0].GetControlChanged() || !got[1].GetControlChanged() {
		t.Errorf("control_changed: %v then %v, want false then true", got[0].GetControlChanged(), got[1].GetControlChanged())
	}
	if local.pokes.Load() != burst-1 || local.refreshes.Load() != 1 {
		t.Errorf("the local tailer got %d pokes and %d control reads, want %d and 1", local.pokes.Load(), local.refreshes.Load(), burst-1)
	}
}

// A poke never waits for a peer, even one whose poke is held forever.
func TestAPokeNeverWaitsForAPeer(t *testing.T) {
	peer, addr := serveHeldPeer(t)
	r := newTestReplica(t, &countingTailer{})
	r.follow([]*ent.CtrldReplica{{ID: "held", Address: addr, Secret: "s"}})
	r.Poke()
	<-peer.arrived
	for range 100 {
		r.Poke() // would block here if pokes waited for the held one
	}
	close(peer.release)
}

// Dropping a peer (its row went stale) cancels its poke in flight and
// closes its connection; the peer's sender ends.
func TestAPeerThatLeavesIsNoLongerPoked(t *testing.T) {
	peer, addr := serveHeldPeer(t)
	r := newTestReplica(t, &countingTailer{})
	r.follow([]*ent.CtrldReplica{{ID: "held", Address: addr, Secret: "s"}})
	r.Poke()
	<-peer.arrived
	r.follow(nil) // returns once the sender ended, its held poke cancelled
	r.Poke()
	if got := len(peer.received()); got != 1 {
		t.Fatalf("%d pokes reached a peer that left, want the 1 sent before", got)
	}
	if n := testutil.ToFloat64(r.metrics.live); n != 0 {
		t.Fatalf("deploysync_peers = %v after the peer left", n)
	}
}

func TestResolveAdvertiseAddr(t *testing.T) {
	for _, c := range []struct{ advertise, listening, want string }{
		{"10.0.0.5", "[::]:7070", "10.0.0.5:7070"},
		{"10.0.0.5:9000", "[::]:7070", "10.0.0.5:9000"},
		{"ctrld-0.ctrld.deploysync.svc", "0.0.0.0:7070", "ctrld-0.ctrld.deploysync.svc:7070"},
		{"fd00::1", "[::]:7070", "[fd00::1]:7070"},
		{"[fd00::1]", "[::]:7070", "[fd00::1]:7070"},
		{"[fd00::1]:7071", "[::]:7070", "[fd00::1]:7071"},
		{"127.0.0.1", "127.0.0.1:41234", "127.0.0.1:41234"},
	} {
		got, err := ResolveAdvertiseAddr(c.advertise, c.listening)
		if err != nil || got != c.want {
			t.Errorf("ResolveAdvertiseAddr(%q, %q) = %q, %v; want %q", c.advertise, c.listening, got, err, c.want)
		}
	}
	for _, bad := range []string{":7070", "host:0", "host:70000", "host:http", "a b", "user@host", "host/path", "http://host:1", "a:b:c", "[::1", string(make([]byte, 300)),
		"0.0.0.0", "::", "[::]:7070", "169.254.169.254", "fe80::1", "224.0.0.1", "1.2.3", "0x7f.1", ""} {
		if got, err := ResolveAdvertiseAddr(bad, "[::]:7070"); err == nil {
			t.Errorf("ResolveAdvertiseAddr(%q) = %q, want an error", bad, got)
		}
	}
}

// Only one host's host:port is dialled: a row naming a scheme, a socket
// file or a path, this host (0.0.0.0), a link-local metadata address or a
// name that is a number in disguise (which only someone writing the table
// by hand could add) is skipped, with a log line.
func TestOnlyHostPortRowsAreDialled(t *testing.T) {
	r := newTestReplica(t, &countingTailer{})
	var logged bytes.Buffer
	r.log = slog.New(slog.NewTextHandler(&logged, nil))
	var rows []*ent.CtrldReplica
	for i, addr := range []string{"unix:///run/x.sock", "unix:x.sock", "dns:///example.com:7070", "passthrough:///10.0.0.1:7070",
		"example.com", "example.com:0", "example.com/path:7070", "user@example.com:7070", "[::1]", "",
		"0.0.0.0:7070", "[::]:7070", "169.254.169.254:80", "[fe80::1]:7070", "224.0.0.1:7070", "1.2.3:7070", "0x7f.1:7070"} {
		rows = append(rows, &ent.CtrldReplica{ID: string(rune('a' + i)), Address: addr, Secret: "s"})
	}
	r.follow(rows)
	if n := r.Peers(); n != 0 {
		t.Fatalf("%d rows with addresses that are not host:port are poked", n)
	}
	if n := strings.Count(logged.String(), "not poking it"); n != len(rows) {
		t.Errorf("%d of %d skipped rows logged:\n%s", n, len(rows), logged.String())
	}
	r.follow([]*ent.CtrldReplica{{ID: "ok", Address: "example.com:7070", Secret: "s"}, {ID: "v6", Address: "[fd00::1]:7070", Secret: "s"}})
	if n := r.Peers(); n != 2 {
		t.Fatalf("%d of 2 host:port rows are poked", n)
	}
}
