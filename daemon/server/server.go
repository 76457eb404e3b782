package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/liveview"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/operator"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxStreamsPerConnection bounds the concurrent streams of one client
// connection.
const maxStreamsPerConnection = 64

// DefaultTokenRecheck is Config.TokenRecheck's default: a revoked token's
// streams (an agent's watch, a person's log follow) end within it. One
// query per interval for all of them, whatever their number.
const DefaultTokenRecheck = 5 * time.Second

// Config is ctrld's configuration.
type Config struct {
	// ListenAddr is the gRPC address, e.g. ":7070".
	ListenAddr string
	// MetricsAddr serves /metrics, /healthz and /readyz; empty disables it.
	MetricsAddr string
	// TLSCert and TLSKey enable TLS; TLSClientCA also requires client
	// certificates signed by it.
	TLSCert, TLSKey, TLSClientCA string
	// Peers says where other replicas on the database reach this one, to
	// poke it after their writes; an empty Peers.AdvertiseAddr turns peer
	// pokes off. Peers.Credentials is set here from the TLS fields.
	Peers peers.Config
	// PeerCA verifies other replicas' certificates when ctrld serves TLS
	// (default: the system's roots). PeerServerName is the name they are
	// verified for (default: the host of each one's advertised address).
	// With TLSClientCA, this replica presents TLSCert to its peers.
	PeerCA, PeerServerName string
	// MaxMessageBytes caps a received message (default
	// limits.MaxMessageBytes); larger requests fail with ResourceExhausted.
	// Sent messages are always capped at limits.MaxMessageBytes, what
	// agents and the console accept, whatever this says.
	MaxMessageBytes int
	// Instance names this process in agents' connection records.
	Instance string
	// TokenRecheck is how often the tokens of running streams are checked
	// again, so a revoked token's stream ends (default DefaultTokenRecheck).
	TokenRecheck time.Duration
	// RefusalAuditWindow: identical operator writes refused by
	// authentication within it are one audit record, with their count
	// (default operator.DefaultRefusalWindow).
	RefusalAuditWindow time.Duration
	// Tailer configures the tailer. Its UnavailableAfter: zero picks
	// tailer.DefaultUnavailableAfter on a Galera node and off on a single
	// server; negative is off.
	Tailer       tailer.Config
	Stream       stream.Config
	Cluster      cluster.Config
	Retention    retention.Config
	Workflow     workflow.Config
	RegionHealth regionhealth.Config
	// RolloutInterval is how often this replica looks at the rollouts in
	// flight (default: every second).
	RolloutInterval time.Duration
	// Reserved are the namespaces no workspace's environment may have;
	// operator calls naming one are refused (the zero value: those always
	// reserved, see naming.Reserved).
	Reserved naming.Reserved
	// WindowClock judges freeze windows as if the database's clock read
	// this much later (desired.WithWindowClock): for rehearsals and the
	// dev stack, never production.
	WindowClock time.Duration
	// Registry receives the metrics (default: a new registry with Go and
	// process collectors).
	Registry *prometheus.Registry
}

// Server is a running ctrld.
type Server struct {
	// Addr is the gRPC listener's address.
	Addr string
	// MetricsAddr is the HTTP listener's address, if any.
	MetricsAddr string
	// Tailer is the process's tailer.
	Tailer *tailer.Tailer
	// Peers is this replica as other replicas poke it; nil when peer pokes
	// are off.
	Peers *peers.Replica
	// Registry holds the process's metrics.
	Registry *prometheus.Registry
	// Sessions mints the credentials of SSH console sessions, which
	// DialInProcess's connections present (see auth.Sessions).
	Sessions *auth.Sessions

	// inProcess is the listener the process's own SSH console reaches
	// the gRPC server through (see DialInProcess).
	inProcess *bufconn.Listener

	// conns are the gRPC listener's open connections; serving is whether
	// the tailer can serve streams, and lostDatabase is signalled when it
	// stops being able to (see shedConnectionsWithoutDatabase).
	conns        *connListener
	serving      atomic.Bool
	lostDatabase chan struct{}

	grpc    *grpc.Server
	ops     *operator.Service // Stop writes the refusals it gathered
	http    *http.Server
	health  *health.Server
	guard   recovery.Guard
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{}
}

// Start starts ctrld on db and returns once it listens.
func Start(ctx context.Context, db *store.DB, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = limits.MaxMessageBytes
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.Stream.Instance = cfg.Instance
	m := metrics.New(cfg.Registry)
	// The count is the process's (store.WithTx is a function, not a
	// server's), so a second server on the same registry shares it.
	cfg.Registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "deploysync_database_conflict_reruns_total",
		Help: "Transactions run again after colliding with another (a deadlock, a Galera certification conflict, a lock wait timeout); a call is refused as Aborted only after 8 runs.",
	}, func() float64 { return float64(store.ConflictReruns()) }))
	guard := recovery.Guard{Log: log, Panics: m.Panics}

	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(limits.MaxMessageBytes),
		// A stream ctrld ended for not reading stays on its connection,
		// with what gRPC had buffered for it, until its client reads or
		// closes the connection; this bounds how many one connection can
		// pile up (an agent needs one stream, a console none).
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// No read buffer of gRPC's own per connection. gRPC's default is
		// 32 KiB per connection, held for its life unless the connection
		// is a bare *net.TCPConn (then gRPC borrows a buffer only while
		// bytes wait); a TLS connection, or the listener's trackedConn, is
		// not one: 10,000 idle agents would hold 320 MiB of empty buffers.
		// Agents send little (heartbeats, reports, flow-control frames),
		// so reading each frame with system calls of its own (its header,
		// then its payload) costs little, and a TLS connection buffers its
		// records itself. Measured by BenchmarkIdleStreams (daemon/stream).
		grpc.ReadBufferSize(0),
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		creds, err := serverTLS(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	if cfg.Peers.AdvertiseAddr != "" {
		creds, err := peerTLS(cfg)
		if err != nil {
			return nil, err
		}
		cfg.Peers.Credentials = creds
	}
	authn := auth.NewAuthenticator(db.Ent, ctrlv1.ClusterService_ServiceDesc.ServiceName, ctrlv1.OperatorService_ServiceDesc.ServiceName)
	authn.Sessions = auth.NewSessions()
	opts = append(opts,
		grpc.ChainUnaryInterceptor(RecoverUnary(guard), authn.Unary,
			newAgentCallLimits(agentCallsPerToken, agentCallsInAll).Unary),
		grpc.ChainStreamInterceptor(RecoverStream(guard), authn.Stream))

	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	conns := newConnListener(lis)
	s := &Server{Sessions: authn.Sessions, inProcess: bufconn.Listen(inProcessBuffer), conns: conns, lostDatabase: make(chan struct{}, 1), Addr: lis.Addr().String(), Registry: cfg.Registry, guard: guard, cancel: cancel, stopped: make(chan struct{})}
	switch {
	case cfg.Tailer.UnavailableAfter < 0:
		cfg.Tailer.UnavailableAfter = 0 // off, as asked
	case cfg.Tailer.UnavailableAfter == 0 && db.Galera:
		// Another replica may read the cluster through another node.
		cfg.Tailer.UnavailableAfter = tailer.DefaultUnavailableAfter
	}
	s.Tailer = tailer.New(db.TailerSQL, cfg.Tailer, log, m)
	// A replica that cannot read its database serves no stream (the tailer
	// ends them and refuses new ones): it says so to health checks, so a
	// balancer that checks sends agents to replicas that can. (Stop's
	// Shutdown of the health server makes later switches no-ops.)
	s.Tailer.OnAvailability(func(available bool) {
		s.serving.Store(available)
		status := healthpb.HealthCheckResponse_NOT_SERVING
		if available {
			status = healthpb.HealthCheckResponse_SERVING
		}
		s.health.SetServingStatus("", status)
		if !available {
			select {
			case s.lostDatabase <- struct{}{}:
			default:
			}
		}
	})
	// Writes committed here poke this tailer, and other replicas' through
	// s.Peers when peer pokes are on.
	var notifier operator.Notifier = s.Tailer
	if cfg.Peers.AdvertiseAddr != "" {
		addr, err := peers.ResolveAdvertiseAddr(cfg.Peers.AdvertiseAddr, s.Addr)
		if err != nil {
			err = fmt.Errorf("advertise address %w", err)
		} else {
			s.Peers, err = peers.New(db.Ent, addr, cfg.Instance, cfg.Peers, s.Tailer, cfg.Registry, guard, log)
		}
		if err != nil {
			lis.Close()
			cancel()
			return nil, err
		}
		notifier = s.Peers
	}
	// Streams use their own pool: however many there are, unary calls keep
	// the main one (invariant I8); the tailer has its own (store.DB).
	streamer := stream.New(db.StreamEnt, db.StreamSQL, s.Tailer, cfg.Stream, log, m)

	s.grpc = grpc.NewServer(append(opts, grpc.StatsHandler(connCloser{conns}))...)
	// The rollout driver looks again as soon as an agent reports.
	driver := &rollout.Driver{Store: desired.New(db.Ent, desired.WithReserved(cfg.Reserved), desired.WithWindowClock(cfg.WindowClock)), Client: db.Ent, DB: db.SQL,
		Log: log, Interval: cfg.RolloutInterval, Metrics: m, Notify: notifier.Poke}
	clusterCfg := cfg.Cluster
	clusterCfg.Reported = driver.Poke
	// Live views: agents' requests and answers meet people's calls here.
	live := liveview.NewHub()
	clusterCfg.Live = live
	ctrlv1.RegisterClusterServiceServer(s.grpc, cluster.New(db.Ent, db.SQL, streamer, clusterCfg, log))
	s.ops = operator.New(db.Ent, db.SQL, notifier, log, desired.WithReserved(cfg.Reserved), desired.WithWindowClock(cfg.WindowClock))
	s.ops.SetLiveViews(live)
	if s.Peers != nil {
		// A region's agent may be connected to another replica.
		live.Remote = s.Peers
		s.Peers.ServeLiveViews(live)
	}
	authn.OnOperatorRefusal = s.ops.AuditRefusal
	ctrlv1.RegisterOperatorServiceServer(s.grpc, s.ops)
	if s.Peers != nil {
		ctrlv1.RegisterPeerServiceServer(s.grpc, s.Peers.Service())
		authn.SelfChecked(ctrlv1.PeerService_Poke_FullMethodName)
		authn.SelfChecked(ctrlv1.PeerService_LiveView_FullMethodName)
	}
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	if cfg.MetricsAddr != "" {
		mlis, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			lis.Close()
			cancel()
			return nil, fmt.Errorf("listen on %s: %w", cfg.MetricsAddr, err)
		}
		s.MetricsAddr = mlis.Addr().String()
		s.http = &http.Server{Handler: s.httpHandler(cfg.Registry, db), ReadHeaderTimeout: 5 * time.Second}
		s.spawn("metrics-http", func() { s.http.Serve(mlis) })
	}

	// NOT_SERVING until the tailer has started (it then says SERVING
	// through its availability hook): until it has loaded its watermark
	// from the database no stream can be served, and a replica whose
	// database is away from the start must not draw agents.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	// The tailer starts over by itself after a panic in a poll (see
	// Tailer.Run); it cannot be run a second time from here.
	s.spawn("tailer", func() {
		// Run returns before shutdown only if its start failed or
		// panicked: no stream can be served any more, so say so to the
		// load balancer and the orchestrator rather than stay SERVING.
		defer func() {
			if runCtx.Err() == nil {
				s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			}
		}()
		if err := s.Tailer.Run(runCtx); err != nil && runCtx.Err() == nil {
			log.Error("tailer stopped", "err", err)
		}
	})
	// These loops keep nothing between rounds but what is in the database
	// (retention's lock is released by its connection's defer), so after a
	// panic they simply start again.
	s.wg.Go(func() {
		recheck := cmp.Or(cfg.TokenRecheck, DefaultTokenRecheck)
		guard.Loop(runCtx, "token-recheck", func(ctx context.Context) { authn.Run(ctx, recheck, log) })
	})
	s.wg.Go(func() { guard.Loop(runCtx, "connection-refresh", streamer.RefreshConnections) })
	s.wg.Go(func() {
		guard.Loop(runCtx, "refusal-audit", func(ctx context.Context) { s.ops.RunRefusalAudit(ctx, cfg.RefusalAuditWindow) })
	})
	if s.Peers != nil {
		// Run deletes this replica's row when runCtx ends, and Stop waits
		// for it: peers stop poking a replica that stopped.
		s.wg.Go(func() { guard.Loop(runCtx, "peers", s.Peers.Run) })
	}
	s.wg.Go(func() { guard.Loop(runCtx, "retention", retention.New(db.SQL, cfg.Retention, log, m).Run) })
	s.wg.Go(func() { guard.Loop(runCtx, "workflow", workflow.New(db.Ent, cfg.Workflow, log, m).Run) })
	s.wg.Go(func() { guard.Loop(runCtx, "rollout", driver.Run) })
	s.wg.Go(func() {
		guard.Loop(runCtx, "region-health", regionhealth.NewPublisher(db.Ent, db.SQL, cfg.RegionHealth, log, m).Run)
	})
	s.spawn("shed-connections", func() {
		s.shedConnectionsWithoutDatabase(runCtx, cmp.Or(cfg.Tailer.UnavailableAfter, tailer.DefaultUnavailableAfter), log)
	})
	s.spawn("grpc-serve", func() {
		if err := s.grpc.Serve(conns); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("grpc server stopped", "err", err)
		}
	})
	s.spawn("grpc-serve-in-process", func() {
		if err := s.grpc.Serve(s.inProcess); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("in-process grpc server stopped", "err", err)
		}
	})
	advertised := ""
	if s.Peers != nil {
		advertised = s.Peers.Address()
	}
	log.Info("ctrld serving", "grpc", s.Addr, "metrics", s.MetricsAddr, "instance", cfg.Instance, "tls", cfg.TLSCert != "", "advertise", advertised)
	return s, nil
}

// inProcessBuffer is the in-process listener's buffer per direction of a
// connection.
const inProcessBuffer = 256 << 10

// DialInProcess connects to this server's gRPC services inside the
// process, presenting credential (from Sessions.Mint) on every call: the
// SSH console's way in. No network is involved, so no TLS either, and a
// session credential is taken on such connections only.
func (s *Server) DialInProcess(credential string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.inProcess.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer.Credentials{Token: credential, Insecure: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.MaxMessageBytes)))
}

// shedConnectionsWithoutDatabase closes every client connection when the
// tailer can no longer read the database, and again every period for as
// long as it cannot: agents then dial again, and the load balancer, which
// sees /readyz fail, sends them to a replica that can serve them (see
// connListener). Connections are never closed while the tailer is
// starting, only after it served and then lost its database.
func (s *Server) shedConnectionsWithoutDatabase(ctx context.Context, period time.Duration, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lostDatabase:
		}
		for !s.serving.Load() {
			if n := s.conns.closeAll(); n > 0 {
				log.Warn("closed every client connection: this replica cannot read its database; clients reconnect, through a load balancer to a replica that can", "connections", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(period):
			}
		}
	}
}

// spawn runs f in a goroutine Stop waits for. A panic in f is logged and
// counted and ends only f.
func (s *Server) spawn(where string, f func()) {
	s.wg.Go(func() { s.guard.Run(where, func() error { f(); return nil }) })
}

// Stop shuts down: health goes NOT_SERVING, the tailer stops (ending every
// stream, whose agents reconnect elsewhere from their last bookmark), and
// in-flight unary calls get up to 10 seconds to finish.
func (s *Server) Stop() {
	select {
	case <-s.stopped:
		return
	default:
		close(s.stopped)
	}
	s.health.Shutdown()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.grpc.Stop()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.http.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
	// No call can be refused any more: what was gathered goes on record.
	s.ops.FlushRefusals(context.Background())
}

func (s *Server) httpHandler(reg *prometheus.Registry, db *store.DB) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.stopped:
			// Whatever the tailer said last: its hook may still be
			// running as Stop begins.
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		default:
		}
		if !s.serving.Load() {
			http.Error(w, "not serving streams: the change log has not been read yet, or cannot be read", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := db.SQL.PingContext(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func serverTLS(cfg Config) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("read client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(tc), nil
}

// peerTLS returns what this replica dials its peers with: TLS when it
// serves TLS (every replica of a database is configured alike), verified
// with PeerCA or the system's roots, presenting this replica's own
// certificate when replicas require client certificates.
func peerTLS(cfg Config) (credentials.TransportCredentials, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		return insecure.NewCredentials(), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.PeerServerName}
	if cfg.PeerCA != "" {
		pem, err := os.ReadFile(cfg.PeerCA)
		if err != nil {
			return nil, fmt.Errorf("read peer CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("peer CA %s holds no PEM certificate", cfg.PeerCA)
		}
	}
	if cfg.TLSClientCA != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS certificate for peers: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), nil
}
