package feedcheck_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/internal/feedcheck"
	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testmariadb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The change feed on a multi-primary Galera cluster: three ctrld replicas,
// each on its own node; the workers write through all three nodes at once,
// so their transactions collide across nodes (certification conflicts) as
// well as on one; followers watch through every replica, each new one
// through the next. Every follower must end with exactly the database's
// desired state.
func TestChangeFeedOnGalera(t *testing.T) {
	if testing.Short() {
		t.Skip("feedcheck: starts a Galera cluster; skipped in -short mode")
	}
	g := testmariadb.OwnGalera(t)
	if g == nil {
		t.Skip("no mariadbd or galera-4")
	}
	ctx := context.Background()
	replicas := galeraReplicas(t, g)
	var next atomic.Int64
	watch := func(region string) ctrlv1.ClusterServiceClient {
		return replicas[int(next.Add(1))%len(replicas)].Agent(region)
	}
	writers := make([]*store.DB, len(replicas))
	for i, r := range replicas {
		writers[i] = r.DB
	}
	// Two rounds on one cluster (the cluster takes a while to start), or
	// the one -feedcheck.seed replays.
	for round := range 2 {
		seed := *seedFlag
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		} else if round > 0 {
			break
		}
		rep, err := feedcheck.Run(ctx, feedcheck.System{DB: replicas[0].DB, Writers: writers, Watch: watch},
			feedcheck.Config{Seed: seed, Transactions: *txsFlag})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		t.Logf("%s", rep.Summary())
		if len(rep.Violations) > 0 {
			t.Fatalf("the change feed diverged from the database on Galera (seed %d; replay: go test ./internal/feedcheck -run TestChangeFeedOnGalera -feedcheck.seed=%d):\n%s",
				seed, seed, strings.Join(rep.Violations, "\n"))
		}
		if rep.Committed < *txsFlag/5 {
			t.Fatalf("seed %d: only %d of %d transactions committed (e.g. refused: %v); the workload proves little", seed, rep.Committed, *txsFlag, rep.FirstError)
		}
	}
}

// galeraReplicas creates a database on g and runs a ctrld replica on each
// node, each with its own connection pools to its own node.
func galeraReplicas(t *testing.T, g *testmariadb.Galera) []*servertest.Env {
	t.Helper()
	ctx := context.Background()
	db, drop, err := testdb.CreateOn(ctx, g.Nodes[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop() })
	var replicas []*servertest.Env
	for i, n := range g.Nodes {
		cfg, err := mysql.ParseDSN(n.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = db.Name
		s, err := store.Open(ctx, cfg.FormatDSN())
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		if !s.Galera {
			t.Fatalf("node %d: store.Open did not find a Galera node (its reads would not wait for the cluster's commits)", i+1)
		}
		t.Cleanup(func() { s.Close() })
		if i == 0 {
			if err := store.Migrate(ctx, s.Ent); err != nil {
				t.Fatal(err)
			}
		}
		replicas = append(replicas, servertest.StartOn(t, s, server.Config{Instance: fmt.Sprintf("replica-%d", i+1)}))
	}
	return replicas
}
