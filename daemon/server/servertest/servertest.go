package servertest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/dial"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Env is a running ctrld with its database.
type Env struct {
	t      testing.TB
	DB     *store.DB
	Server *server.Server
	Config server.Config
}

// Start runs ctrld on a fresh database until t ends. Zero config fields
// take fast test defaults (10ms polls, 100ms hole grace).
func Start(t testing.TB, cfg server.Config) *Env {
	t.Helper()
	return StartOn(t, storetest.New(t), cfg)
}

// StartOn is Start on db, a database from storetest.New that the test has
// prepared: say, with an Ent query interceptor that must be in place
// before ctrld's goroutines start querying.
func StartOn(t testing.TB, db *store.DB, cfg server.Config) *Env {
	t.Helper()
	e := &Env{t: t, DB: db, Config: withTestDefaults(cfg)}
	e.start()
	return e
}

func withTestDefaults(cfg server.Config) server.Config {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.Tailer.PollInterval == 0 {
		cfg.Tailer.PollInterval = 10 * time.Millisecond
	}
	if cfg.Tailer.HoleGrace == 0 {
		cfg.Tailer.HoleGrace = 100 * time.Millisecond
	}
	if cfg.Tailer.ControlInterval == 0 {
		cfg.Tailer.ControlInterval = 100 * time.Millisecond
	}
	if cfg.TokenRecheck == 0 {
		cfg.TokenRecheck = 100 * time.Millisecond
	}
	if cfg.Stream.KeepAlive == 0 {
		cfg.Stream.KeepAlive = time.Second
	}
	return cfg
}

func (e *Env) start() {
	e.t.Helper()
	s, err := server.Start(context.Background(), e.DB, e.Config, Logger())
	if err != nil {
		e.t.Fatal(err)
	}
	e.Server = s
	e.t.Cleanup(s.Stop)
}

// Restart stops ctrld and starts a new one on the same database and
// address, as a restarted process would: clients reconnect to it.
func (e *Env) Restart() {
	e.t.Helper()
	e.Server.Stop()
	e.Config.ListenAddr = e.Server.Addr
	e.start()
}

// StartReplica starts a second ctrld on the same database, as another
// replica behind the same load balancer would run.
func (e *Env) StartReplica() *server.Server {
	e.t.Helper()
	return e.StartReplicaOn(e.DB)
}

// StartReplicaOn starts another ctrld on db, the same database as e's
// reached another way (another node of a multi-primary cluster), until the
// test ends or it is stopped.
func (e *Env) StartReplicaOn(db *store.DB) *server.Server {
	e.t.Helper()
	cfg := e.Config
	cfg.ListenAddr = "127.0.0.1:0"
	s, err := server.Start(context.Background(), db, cfg, Logger())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Stop)
	return s
}

// Logger logs to stderr when DEPLOYSYNC_TEST_LOG is set, else nowhere.
func Logger() *slog.Logger {
	if os.Getenv("DEPLOYSYNC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// AgentToken issues an agent token for region (registering the region).
func (e *Env) AgentToken(region string) string {
	e.t.Helper()
	token, err := auth.Create(context.Background(), e.DB.Ent, apitoken.KindAgent, "agent-"+region, region)
	if err != nil {
		e.t.Fatal(err)
	}
	return token
}

// OperatorToken issues an operator token named name, with every grant
// (it reads logs too): the operator of a test that may do everything.
// OperatorTokenWith issues one with fewer.
func (e *Env) OperatorToken(name string) string {
	e.t.Helper()
	return e.OperatorTokenWith(name, auth.Grants{Logs: true})
}

// OperatorTokenWith issues an operator token named name with grants only
// (auth.Grants{}: none, as `ctrld token create --operator` without flags).
func (e *Env) OperatorTokenWith(name string, grants auth.Grants) string {
	e.t.Helper()
	token, err := auth.CreateWith(context.Background(), e.DB.Ent, apitoken.KindOperator, name, "", grants)
	if err != nil {
		e.t.Fatal(err)
	}
	return token
}

// Dial connects to the current server with token (no TLS, loopback).
func (e *Env) Dial(token string) *grpc.ClientConn {
	e.t.Helper()
	return Dial(e.t, e.Server.Addr, token)
}

// Dial connects to addr with token (no TLS, loopback); closed when t ends.
func Dial(t testing.TB, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer.Credentials{Token: token, Insecure: true}),
		grpc.WithConnectParams(dial.Reconnect())) // as agents and the console reconnect
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Agent returns a cluster-service client for region, with its own token.
func (e *Env) Agent(region string) ctrlv1.ClusterServiceClient {
	e.t.Helper()
	return ctrlv1.NewClusterServiceClient(e.Dial(e.AgentToken(region)))
}

// Operator returns an operator-service client named name.
func (e *Env) Operator(name string) ctrlv1.OperatorServiceClient {
	e.t.Helper()
	return ctrlv1.NewOperatorServiceClient(e.Dial(e.OperatorToken(name)))
}
