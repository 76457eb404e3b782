package servertest

import (
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ServeWatcher serves the cluster service on db with another stream
// algorithm (the seed's, to show what a checker catches) until t ends, and
// returns its address. Tokens are checked as ctrld checks them, and a
// panicking call ends that call, as in ctrld (the seed algorithm
// dereferences a deployment deleted under it).
func ServeWatcher(t testing.TB, db *store.DB, w cluster.Watcher) string {
	t.Helper()
	authn := auth.NewAuthenticator(db.Ent, ctrlv1.ClusterService_ServiceDesc.ServiceName, ctrlv1.OperatorService_ServiceDesc.ServiceName)
	guard := recovery.Guard{Log: slog.New(slog.DiscardHandler)}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(server.RecoverUnary(guard), authn.Unary),
		grpc.ChainStreamInterceptor(server.RecoverStream(guard), authn.Stream))
	ctrlv1.RegisterClusterServiceServer(srv, cluster.New(db.Ent, db.SQL, w, cluster.Config{}, slog.New(slog.DiscardHandler)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}
