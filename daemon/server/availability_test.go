package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testmariadb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A replica whose database is gone says NOT_SERVING to health checks and
// fails /readyz (a balancer sends agents elsewhere), refuses streams with
// Unavailable, and closes its clients' connections, so that they dial
// again, through the balancer, instead of retrying on a connection that
// stays with it; once the database answers it serves again.
func TestAReplicaWithoutItsDatabaseIsNotServing(t *testing.T) {
	if testing.Short() {
		t.Skip("server: starts a MariaDB server of its own; skipped in -short mode")
	}
	db := testmariadb.Own(t)
	if db == nil {
		t.Skip("no mariadbd")
	}
	env := servertest.StartOn(t, storetest.NewOn(t, db.DSN), server.Config{MetricsAddr: "127.0.0.1:0",
		Tailer: tailer.Config{UnavailableAfter: 300 * time.Millisecond}})
	agent := env.Agent("eu")
	conn := env.Dial("")
	health := healthpb.NewHealthClient(conn)
	ready := func() int {
		r, err := http.Get("http://" + env.Server.MetricsAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	ctx := context.Background()
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		var got string
		reached := false
		defer func() {
			if !reached {
				t.Logf("health was last %s", got)
			}
		}()
		eventually.True(t, 30*time.Second, fmt.Sprintf("health never %v", want), func() bool {
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			got = fmt.Sprintf("%v (%v)", r.GetStatus(), err)
			return err == nil && r.Status == want
		})
		reached = true
	}
	watch := func() error {
		stream, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "a"})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz: %d, want 200", code)
	}

	db.Kill()
	// The connection the health checks use is closed by ctrld.
	closed, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !conn.WaitForStateChange(closed, connectivity.Ready) {
		t.Fatal("the client's connection stayed open with the database gone")
	}
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the database gone: %d, want 503", code)
	}
	if err := watch(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a watch with the database gone: %v, want Unavailable", err)
	}

	if err := db.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz once the database answers again: %d, want 200", code)
	}
	if err := watch(); err != nil {
		t.Fatalf("a watch once the database answers again: %v", err)
	}
}

// A replica whose unary calls hold every connection of the main pool (a
// burst of status reports, calls waiting on locks) still reads its change
// log: the tailer has connections of its own, so a wait for one is never
// taken for a database that hangs, and no stream ends for it.
func TestABusyMainPoolLeavesTheReplicaServing(t *testing.T) {
	env := servertest.Start(t, server.Config{Tailer: tailer.Config{UnavailableAfter: 300 * time.Millisecond}})
	ctx := context.Background()
	sub, err := env.Server.Tailer.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var held []*sql.Conn
	for range store.MainConns {
		c, err := env.DB.SQL.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(time.Second) // more than three times UnavailableAfter
	for _, c := range held {
		c.Close()
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("the stream's subscription ended while the main pool was busy: %v", err)
	}
	health := healthpb.NewHealthClient(env.Dial(""))
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v (%v), want SERVING", r.GetStatus(), err)
	}
}
