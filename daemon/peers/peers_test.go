package peers_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/ent/ctrldreplica"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testcerts"
	"github.com/deploysync/deploysync/internal/testmetrics"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// slowPolls is a poll interval no test outlives: with it, a change reaches
// a replica's agents only if something pokes that replica's tailer.
const slowPolls = time.Hour

// replicasConfig is two replicas' config: pokes on, polls that never come,
// heartbeats fast enough that replicas find each other at once.
func replicasConfig() server.Config {
	var cfg server.Config
	cfg.Tailer.PollInterval = slowPolls
	cfg.Peers = peers.Config{AdvertiseAddr: "127.0.0.1", Heartbeat: 50 * time.Millisecond, PeerTTL: time.Minute}
	return cfg
}

// follow streams region from the replica at addr until the test ends, once
// its full sync is done.
func follow(t *testing.T, env *servertest.Env, addr, region string) *streamtest.Follower {
	t.Helper()
	f := streamtest.New(ctrlv1.NewClusterServiceClient(servertest.Dial(t, addr, env.AgentToken(region))), region, "agent-"+region)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if s, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatalf("no full sync: %+v", s)
	}
	return f
}

func replicasOf(s streamtest.Snapshot, id string) int32 {
	ev := s.View[streamtest.Key{Kind: "deployment", ID: id}]
	if ev == nil {
		return -1
	}
	return ev.GetDeployment().GetDeployment().GetReplicas()
}

func deploy(t *testing.T, op ctrlv1.OperatorServiceClient, id string, replicas int32) {
	t.Helper()
	_, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: replicas})
	if err != nil {
		t.Fatalf("deploy %s: %v", id, err)
	}
}

func polls(t testing.TB, s *server.Server) float64 {
	return testmetrics.Sum(t, s.Registry, "deploysync_tailer_poll_duration_seconds")
}

// waitPeers waits until s pokes n peers.
func waitPeers(t *testing.T, s *server.Server, n int) {
	t.Helper()
	eventually.True(t, 30*time.Second, fmt.Sprintf("replica %s never pokes %d peers", s.Addr, n), func() bool {
		return testmetrics.Sum(t, s.Registry, "deploysync_peers") == float64(n)
	})
}

// An operator's write through one replica reaches an agent streaming from
// another at once. The other replica never polls (slowPolls), so only the
// poke can have told it.
func TestAWriteThroughOneReplicaReachesAgentsOnAnother(t *testing.T) {
	env := servertest.Start(t, replicasConfig())
	b := env.StartReplica()
	waitPeers(t, env.Server, 1)
	waitPeers(t, b, 1)
	agent := follow(t, env, b.Addr, "eu")

	deploy(t, env.Operator("alice"), "through-a", 3)
	if s, ok := agent.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "through-a") == 3 }); !ok {
		t.Fatalf("a write through replica A never reached the agent on replica B: %+v", s)
	}
	// And the other way round: B pokes A.
	onA := follow(t, env, env.Server.Addr, "us")
	_, err := ctrlv1.NewOperatorServiceClient(servertest.Dial(t, b.Addr, env.OperatorToken("bob"))).Deploy(context.Background(),
		&ctrlv1.DeployRequest{DeploymentId: "through-b", WorkspaceId: "ws", EnvironmentId: "prod", Image: "app:1",
			CpuMillicores: 100, MemoryMib: 64, Regions: []string{"us"}, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := onA.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "through-b") == 2 }); !ok {
		t.Fatalf("a write through replica B never reached the agent on replica A: %+v", s)
	}
}

// A pause through one replica reaches the other's streams at once too
// (region control is otherwise read every second; here, every hour).
func TestAPauseThroughOneReplicaReachesAnother(t *testing.T) {
	cfg := replicasConfig()
	cfg.Tailer.ControlInterval = slowPolls
	env := servertest.Start(t, cfg)
	b := env.StartReplica()
	waitPeers(t, env.Server, 1)
	env.AgentToken("eu")
	if _, err := env.Operator("alice").SetRegionPaused(context.Background(), &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the other replica never heard of the pause", func() bool {
		sub, err := b.Tailer.Subscribe(context.Background(), "eu")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		return sub.Control.Paused
	})
}

// A replica that stops deletes its row, so its peers stop poking it; a
// running one keeps its row fresh; neither writes a change row.
func TestAStoppedReplicaLeavesTheRegistry(t *testing.T) {
	env := servertest.Start(t, replicasConfig())
	ctx := context.Background()
	changes := func() int { return env.DB.Ent.DeploymentChange.Query().CountX(ctx) }
	before := changes()
	b := env.StartReplica()
	waitPeers(t, env.Server, 1)
	rows := env.DB.Ent.CtrldReplica.Query().AllX(ctx)
	if len(rows) != 2 {
		t.Fatalf("%d rows in ctrld_replicas, want 2", len(rows))
	}
	for _, r := range rows {
		want := map[string]string{env.Server.Peers.ID(): env.Server.Addr, b.Peers.ID(): b.Addr}[r.ID]
		if r.Address != want {
			t.Errorf("replica %s registered at %q, want %q (its listener)", r.ID, r.Address, want)
		}
	}
	if strings.Contains(rows[0].String(), rows[0].Secret) {
		t.Error("a replica row prints its secret")
	}
	first := env.DB.Ent.CtrldReplica.GetX(ctx, b.Peers.ID()).HeartbeatAt
	eventually.True(t, 30*time.Second, "the replica never heartbeats again", func() bool { return env.DB.Ent.CtrldReplica.GetX(ctx, b.Peers.ID()).HeartbeatAt.After(first) })

	b.Stop()
	if n := env.DB.Ent.CtrldReplica.Query().Where(ctrldreplica.ID(b.Peers.ID())).CountX(ctx); n != 0 {
		t.Fatal("a stopped replica's row is still there")
	}
	waitPeers(t, env.Server, 0)
	if after := changes(); after != before {
		t.Fatalf("the registry wrote %d change rows", after-before)
	}
}

// blackhole accepts connections and never answers: a peer that hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// Registered peers that hang or refuse connections neither delay nor fail
// an operator's write, nor keep a live peer from being poked. Pokes may
// wait an hour here: a write that waited for one would never return.
func TestDeadPeersNeitherBlockNorFailAWrite(t *testing.T) {
	cfg := replicasConfig()
	cfg.Peers.PokeTimeout = slowPolls
	env := servertest.Start(t, cfg)
	ctx := context.Background()
	for id, addr := range map[string]string{"hangs": blackhole(t), "refuses": closedPort(t)} {
		env.DB.Ent.CtrldReplica.Create().SetID(id).SetInstance(id).SetAddress(addr).SetSecret("s").ExecX(ctx)
	}
	b := env.StartReplica()
	waitPeers(t, env.Server, 3)
	agent := follow(t, env, b.Addr, "eu")

	op := env.Operator("alice")
	for i := range 5 {
		deploy(t, op, fmt.Sprintf("d%d", i), int32(i+1))
	}
	if s, ok := agent.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "d4") == 5 }); !ok {
		t.Fatalf("the live replica's agent never got the writes: %+v", s)
	}
	if errs := testmetrics.Sum(t, env.Server.Registry, "deploysync_peer_pokes_sent_total", "result", "error"); errs == 0 {
		t.Fatal("no poke failed: the dead peers were never dialled")
	}
}

// Poke takes no bearer token, and obeys only the target's own secret: a
// wrong one, however often, with whatever token, is refused and makes the
// tailer read nothing. The replica's secret, read from the database, works.
func TestAPokeWithoutTheSecretIsRefusedAndPollsNothing(t *testing.T) {
	env := servertest.Start(t, replicasConfig())
	b := env.StartReplica()
	waitPeers(t, env.Server, 1)
	ctx := context.Background()
	secretOf := func(s *server.Server) string { return env.DB.Ent.CtrldReplica.GetX(ctx, s.Peers.ID()).Secret }
	bSecret, aSecret := secretOf(b), secretOf(env.Server)

	conn, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	peer := ctrlv1.NewPeerServiceClient(conn)
	withToken := ctrlv1.NewPeerServiceClient(servertest.Dial(t, b.Addr, env.OperatorToken("mallory")))

	flipped := []byte(bSecret)
	flipped[len(flipped)-1] ^= 1
	wrong := []string{"", "x", aSecret, string(flipped), bSecret[:len(bSecret)-1], bSecret + "0", strings.ToUpper(bSecret), strings.Repeat("a", 64<<10)}
	eventually.True(t, 30*time.Second, "the tailer never polled", func() bool { return polls(t, b) > 0 })
	before := polls(t, b)
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			client := peer
			if i%2 == 1 {
				client = withToken
			}
			secret := wrong[i%len(wrong)]
			_, err := client.Poke(ctx, &ctrlv1.PokeRequest{Secret: secret, ControlChanged: true})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("a poke with secret %.12q…: %v, want Unauthenticated", secret, err)
			}
		})
	}
	wg.Wait()
	if got := polls(t, b); got != before {
		t.Fatalf("wrong secrets made the tailer poll %v times", got-before)
	}
	if refused := testmetrics.Sum(t, b.Registry, "deploysync_peer_pokes_received_total", "result", "refused"); refused != 500 {
		t.Errorf("%v pokes counted as refused, want 500", refused)
	}

	if _, err := peer.Poke(ctx, &ctrlv1.PokeRequest{Secret: bSecret}); err != nil {
		t.Fatalf("the replica's own secret: %v", err)
	}
	eventually.True(t, 30*time.Second, "the right secret did not make the tailer poll", func() bool { return polls(t, b) > before })
}

// The token check lets Poke through without a token, and nothing else of
// the PeerService, which exists only while pokes are on.
func TestOnlyPokeAndLiveViewAreOpenWithoutAToken(t *testing.T) {
	env := servertest.Start(t, replicasConfig())
	conn, err := grpc.NewClient(env.Server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	_, err = ctrlv1.NewPeerServiceClient(conn).Poke(ctx, &ctrlv1.PokeRequest{Secret: "guess"})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "secret") {
		t.Fatalf("a tokenless poke: %v, want the secret's refusal", err)
	}
	if _, err := ctrlv1.NewOperatorServiceClient(conn).ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a tokenless operator call: %v, want Unauthenticated", err)
	}
	// LiveView checks the secret as Poke does, and relays nothing for a
	// guess.
	lv, err := ctrlv1.NewPeerServiceClient(conn).LiveView(ctx, &ctrlv1.LiveViewRequest{Secret: "guess", Region: "eu", Request: &ctrlv1.LiveRequest{Kind: "logs"}})
	if err == nil {
		_, err = lv.Recv()
	}
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "secret") {
		t.Fatalf("a tokenless live view: %v, want the secret's refusal", err)
	}
	var open []string
	for _, m := range ctrlv1.PeerService_ServiceDesc.Methods {
		open = append(open, m.MethodName)
	}
	for _, st := range ctrlv1.PeerService_ServiceDesc.Streams {
		open = append(open, st.StreamName)
	}
	if !slices.Equal(open, []string{"Poke", "LiveView"}) {
		t.Fatalf("PeerService has %v: say in daemon/auth which take no token, and test each here", open)
	}

	off := servertest.Start(t, server.Config{})
	conn, err = grpc.NewClient(off.Server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := ctrlv1.NewPeerServiceClient(conn).Poke(ctx, &ctrlv1.PokeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a poke of a replica with pokes off: %v, want Unimplemented", err)
	}
	if off.Server.Peers != nil {
		t.Fatal("pokes are on without an advertised address")
	}
}

// Replicas that serve TLS poke each other over TLS, verifying each other
// with the peer CA.
func TestReplicasServingTLSPokeOverTLS(t *testing.T) {
	certs := testcerts.Write(t)
	cfg := replicasConfig()
	cfg.TLSCert, cfg.TLSKey, cfg.PeerCA = certs.ServerCert, certs.ServerKey, certs.CA
	env := servertest.Start(t, cfg)
	b := env.StartReplica()
	waitPeers(t, env.Server, 1)

	// The operator and the agent talk TLS to the replicas too.
	op := ctrlv1.NewOperatorServiceClient(tlsDial(t, env.Server.Addr, certs.CA, env.OperatorToken("alice")))
	f := streamtest.New(ctrlv1.NewClusterServiceClient(tlsDial(t, b.Addr, certs.CA, env.AgentToken("eu"))), "eu", "agent-eu")
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("no full sync over TLS")
	}
	deploy(t, op, "over-tls", 4)
	if s, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return replicasOf(s, "over-tls") == 4 }); !ok {
		t.Fatalf("a write through replica A never reached the agent on replica B over TLS: %+v", s)
	}
	if errs := testmetrics.Sum(t, env.Server.Registry, "deploysync_peer_pokes_sent_total", "result", "error"); errs != 0 {
		t.Fatalf("%v pokes failed over TLS", errs)
	}
}

func tlsDial(t *testing.T, addr, ca, token string) *grpc.ClientConn {
	t.Helper()
	creds, err := credentials.NewClientTLSFromFile(ca, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(bearer.Credentials{Token: token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// However many rows the table holds, a replica pokes at most MaxPeers.
func TestAFloodedRegistryIsBounded(t *testing.T) {
	env := servertest.Start(t, replicasConfig())
	ctx := context.Background()
	for i := range peers.MaxPeers + 36 {
		id := fmt.Sprintf("flood-%d", i)
		env.DB.Ent.CtrldReplica.Create().SetID(id).SetInstance(id).SetAddress(closedPort(t)).SetSecret("s").ExecX(ctx)
	}
	waitPeers(t, env.Server, peers.MaxPeers)
}

// A replica whose --advertise-addr no peer could poke it at (every host's
// address, a link-local metadata address, a number in disguise) does not
// start, saying why, and registers nothing.
func TestAReplicaAdvertisingAnAddressNoPeerCanUseDoesNotStart(t *testing.T) {
	db := storetest.New(t)
	for _, c := range []struct{ advertise, why string }{
		{"0.0.0.0", "no one host's"},
		{"::", "no one host's"},
		{"169.254.169.254", "link-local"},
		{"[fe80::1]:7070", "link-local"},
		{"1.2.3", "looks like a number"},
		{"0x7f.1:7070", "looks like a number"},
		{"10.0.0.5:0", "port"},
	} {
		cfg := replicasConfig()
		cfg.ListenAddr = "127.0.0.1:0"
		cfg.Peers.AdvertiseAddr = c.advertise
		srv, err := server.Start(context.Background(), db, cfg, servertest.Logger())
		if err == nil {
			srv.Stop()
			t.Errorf("--advertise-addr %q: ctrld started, want it refused (%s)", c.advertise, c.why)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "advertise address") || !strings.Contains(msg, c.why) {
			t.Errorf("--advertise-addr %q: %v; want it to name the advertise address and say %q", c.advertise, err, c.why)
		}
	}
	if n := db.Ent.CtrldReplica.Query().CountX(context.Background()); n != 0 {
		t.Errorf("refused replicas registered %d rows", n)
	}
}
