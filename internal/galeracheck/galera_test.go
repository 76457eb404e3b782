package galeracheck

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client-side health checks: a balancer skips NOT_SERVING replicas
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	dcluster "github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/feedcheck"
	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testmariadb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

var (
	seedFlag = flag.Uint64("galeracheck.seed", 0, "replay this seed in the change-feed rounds")
	txsFlag  = flag.Int("galeracheck.txs", 600, "transactions per change-feed round")
)

// One cluster for every check (it takes 20-40 s to start), each a subtest
// in turn; the last loses a node and a replica for good.
func TestOnGalera(t *testing.T) {
	g := testmariadb.OwnGalera(t)
	c := startCluster(t, g, server.Config{})
	t.Run("feed", func(t *testing.T) { c.checkFeed(t, nil) })
	t.Run("operators see no conflicts", c.checkOperatorsSeeNoConflicts)
	t.Run("agents admitted through every node keep the region's limit", func(t *testing.T) {
		checkAdmissionLimit(t, startCluster(t, g, server.Config{Cluster: dcluster.Config{MaxAgentsPerRegion: admissionLimit}}))
	})
	t.Run("a rollout's step happens once through every node", func(t *testing.T) {
		// The replicas' own drivers stay out of it: the test takes the
		// steps, from every node at once.
		checkRolloutStepsOnce(t, startCluster(t, g, server.Config{RolloutInterval: time.Hour}))
	})
	t.Run("a pacing bound holds through every node", func(t *testing.T) {
		checkPacingBound(t, startCluster(t, g, server.Config{RolloutInterval: time.Hour}))
	})
	t.Run("feed while a node and a replica are lost", func(t *testing.T) {
		c.checkFeed(t, func(ctx context.Context) {
			sleep(ctx, 500*time.Millisecond)
			t.Logf("killing database node 2 (replica 2 loses its database)")
			g.Nodes[1].Kill()
			sleep(ctx, time.Second)
			t.Logf("stopping replica 3")
			c.replicas[2].Server.Stop()
		})
	})
}

// cluster is a ctrld replica on each Galera node, one database.
type cluster struct {
	replicas []*servertest.Env
	next     atomic.Int64 // spreads new clients over the replicas
}

// startCluster creates a database on g and runs a ctrld replica with cfg on
// each node, each with its own connection pools to its own node.
func startCluster(t testing.TB, g *testmariadb.Galera, cfg server.Config) *cluster {
	t.Helper()
	ctx := context.Background()
	db, drop, err := testdb.CreateOn(ctx, g.Nodes[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop() })
	c := &cluster{}
	for i, n := range g.Nodes {
		dsn, err := mysql.ParseDSN(n.DSN)
		if err != nil {
			t.Fatal(err)
		}
		dsn.DBName = db.Name
		s, err := store.Open(ctx, dsn.FormatDSN())
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
		cfg.Instance = fmt.Sprintf("replica-%d", i+1)
		c.replicas = append(c.replicas, servertest.StartOn(t, s, cfg))
	}
	return c
}

// dial connects with token to every replica at once, as clients behind a
// load balancer do: round robin over the replicas that are up and SERVING,
// the first one tried chosen in turn so that clients spread.
func (c *cluster) dial(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	first := int(c.next.Add(1))
	var addrs []resolver.Address
	for i := range c.replicas {
		addrs = append(addrs, resolver.Address{Addr: c.replicas[(first+i)%len(c.replicas)].Server.Addr})
	}
	r := manual.NewBuilderWithScheme("ctrld")
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///replicas",
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer.Credentials{Token: token, Insecure: true}),
		grpc.WithConnectParams(dial.Reconnect()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkFeed runs one change-feed round: workers write through all three
// nodes, followers watch through all replicas, during runs beside them.
func (c *cluster) checkFeed(t *testing.T, during func(ctx context.Context)) {
	var writers []*store.DB
	for _, r := range c.replicas {
		writers = append(writers, r.DB)
	}
	watch := func(region string) ctrlv1.ClusterServiceClient {
		return ctrlv1.NewClusterServiceClient(c.dial(t, c.replicas[0].AgentToken(region)))
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rep, err := feedcheck.Run(context.Background(), feedcheck.System{DB: c.replicas[0].DB, Writers: writers, Watch: watch, During: during},
		feedcheck.Config{Seed: seed, Transactions: *txsFlag})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("%s", rep.Summary())
	if len(rep.Violations) > 0 {
		t.Fatalf("the change feed diverged from the database on Galera (seed %d; replay: go test ./internal/galeracheck -run 'TestOnGalera/%s' -galeracheck.seed=%d):\n%s",
			seed, strings.ReplaceAll(t.Name()[strings.Index(t.Name(), "/")+1:], " ", "_"), seed, strings.Join(rep.Violations, "\n"))
	}
	if rep.Committed < *txsFlag/5 {
		t.Fatalf("seed %d: only %d of %d transactions committed (e.g. refused: %v); the workload proves little", seed, rep.Committed, *txsFlag, rep.FirstError)
	}
	// Its workers collide on purpose and without pause, so a few may lose
	// every rerun (see checkOperatorsSeeNoConflicts for the promise to
	// operators); counted, not failed.
	if rep.Conflicts > 0 {
		t.Logf("seed %d: %d transactions still collided after store.WithTx's reruns", seed, rep.Conflicts)
	}
}

// Two operators scale one deployment at once through replicas on different
// nodes, a few milliseconds apart, so their transactions fail certification
// against each other again and again: every call must still succeed
// (store.WithTx reruns them).
//
// Not back to back: a writer that commits to one row without pause through
// one node can starve another node's writer of it (optimistic certification
// has no queue; on one server the row lock is one), and after eight lost
// runs the starved call is refused as Aborted, which the README states.
func (c *cluster) checkOperatorsSeeNoConflicts(t *testing.T) {
	ctx := context.Background()
	c.replicas[0].AgentToken("eu") // registers the region
	ops := []ctrlv1.OperatorServiceClient{c.replicas[0].Operator("alice"), c.replicas[1].Operator("bob")}
	if _, err := ops[0].Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "hot", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 128, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	reruns := store.ConflictReruns()
	const perOperator = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*perOperator)
	for i, op := range ops {
		wg.Go(func() {
			think := rand.New(rand.NewPCG(uint64(i), 0))
			for n := range perOperator {
				time.Sleep(time.Duration(think.IntN(20)) * time.Millisecond)
				_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "hot", Region: "eu", Replicas: int32(1 + (n+i)%5)})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var aborted, other int
	var first error
	for err := range errs {
		if status.Code(err) == codes.Aborted {
			aborted++
		} else {
			other++
		}
		if first == nil {
			first = err
		}
	}
	if aborted+other > 0 {
		t.Fatalf("%d of %d scales failed (%d aborted as collisions), e.g. %v", aborted+other, 2*perOperator, aborted, first)
	}
	// Proof that they collided: the reruns that hid it from them.
	if n := store.ConflictReruns() - reruns; n == 0 {
		t.Fatal("no transaction was rerun: the operators never collided, and the check proves nothing")
	} else {
		t.Logf("%d scales through two nodes, all done; %d transactions rerun after a conflict", 2*perOperator, n)
	}
}

// admissionLimit is the agent records a region may have in
// checkAdmissionLimit.
const admissionLimit = 2

// checkAdmissionLimit has new agents report at once through every replica,
// each on its own node, in several regions: each region ends with no more
// agent records than its limit. Each node's admission locks the region on
// that node only; unless the nodes' admissions collide at certification,
// two of them count the same free places.
func checkAdmissionLimit(t *testing.T, c *cluster) {
	ctx := context.Background()
	const regions, perRegion = 8, 6
	var wg sync.WaitGroup
	for r := range regions {
		region := fmt.Sprintf("r%d", r)
		var clients []ctrlv1.ClusterServiceClient
		for _, replica := range c.replicas {
			clients = append(clients, replica.Agent(region))
		}
		start := make(chan struct{})
		for i := range perRegion {
			wg.Go(func() {
				<-start
				// Refused (the region full) or admitted: only the
				// records written count.
				clients[i%len(clients)].ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{
					Region: region, AgentIdentity: fmt.Sprintf("agent-%d", i)})
			})
		}
		close(start)
	}
	wg.Wait()
	over := 0
	for r := range regions {
		n, err := c.replicas[0].DB.Ent.Agent.Query().Where(entagent.Region(fmt.Sprintf("r%d", r))).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > admissionLimit {
			over++
			t.Errorf("region r%d has %d agent records, its limit is %d", r, n, admissionLimit)
		} else if n == 0 {
			t.Errorf("region r%d has no agent record: no admission was tried", r)
		}
	}
	t.Logf("%d regions, %d new agents each through %d nodes: %d over the limit", regions, perRegion, len(c.replicas), over)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkRolloutStepsOnce has every node take the same step of each of many
// rollouts at once (promote the next wave, at the version all read): each
// step is written once. Row locks hold on one node only; the rollout's
// version column, which every step updates, is what certification fences:
// a second node's step fails it, and its rerun finds the version moved.
func checkRolloutStepsOnce(t *testing.T, c *cluster) {
	ctx := context.Background()
	stores := make([]*desired.Store, len(c.replicas))
	for i, r := range c.replicas {
		stores[i] = desired.New(r.DB.Ent)
	}
	regions := []string{"ap", "eu", "us"}
	for _, r := range regions {
		if err := stores[0].EnsureRegion(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waves := jsontype.Strategy{Waves: []jsontype.Wave{{Regions: []string{"eu"}}, {Regions: []string{"us"}}, {Regions: []string{"*"}}}}
	const rollouts = 12
	for i := range rollouts {
		id := fmt.Sprintf("app-%d", i)
		err := stores[i%len(stores)].Deploy(ctx, desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod",
			Image: "app:1", CPUMillicores: 10, MemoryMiB: 16}, regions, 1)
		if err != nil {
			t.Fatal(err)
		}
		v2 := "app:2"
		if _, err := stores[(i+1)%len(stores)].UpdateDeployment(desired.WithStrategy(ctx, waves), id, desired.SpecUpdate{Image: &v2}); err != nil {
			t.Fatal(err)
		}
	}
	inFlight, err := stores[0].InFlight(ctx)
	if err != nil || len(inFlight) != rollouts {
		t.Fatalf("%d rollouts in flight, %v; want %d", len(inFlight), err, rollouts)
	}
	var wg sync.WaitGroup
	var written, fenced, failed atomic.Int64
	for _, r := range inFlight {
		start := make(chan struct{})
		for _, s := range stores {
			wg.Go(func() {
				<-start
				err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true})
				switch {
				case err == nil:
					written.Add(1)
				case errors.Is(err, desired.ErrConcurrentChange):
					fenced.Add(1)
				default:
					failed.Add(1)
					t.Errorf("rollout of %s: %v", r.DeploymentID, err)
				}
			})
		}
		close(start)
	}
	wg.Wait()
	t.Logf("%d rollouts, the same step through %d nodes at once: %d written, %d fenced", rollouts, len(stores), written.Load(), fenced.Load())
	after, err := c.replicas[0].DB.Ent.Rollout.Query().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range after {
		if r.Wave != 1 {
			t.Errorf("rollout of %s is at wave %d after one step taken from every node; want 2 of 3 (index 1)", r.DeploymentID, r.Wave+1)
		}
		promotions, err := c.replicas[0].DB.Ent.DeploymentChange.Query().
			Where(deploymentchange.ResourceID(r.DeploymentID), deploymentchange.Region("us")).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// us: its row from the deploy, and one promotion.
		if promotions != 2 {
			t.Errorf("%s in us has %d change rows; want 2 (the deploy's and one promotion)", r.DeploymentID, promotions)
		}
	}
	if written.Load() != rollouts {
		t.Errorf("%d steps written for %d rollouts", written.Load(), rollouts)
	}
}

// checkPacingBound has every node start every queued rollout at once (as
// every replica's driver would, each reading the same queue): a bound of 2
// rollouts in flight in the environment lets exactly 2 start. Row locks
// hold on one node only; each start writes the fleet_control row, so
// certification fails all but one of those that ran together, and their
// reruns read the bound full.
func checkPacingBound(t *testing.T, c *cluster) {
	ctx := context.Background()
	stores := make([]*desired.Store, len(c.replicas))
	for i, r := range c.replicas {
		stores[i] = desired.New(r.DB.Ent)
	}
	regions := []string{"ap", "eu", "us"}
	for _, r := range regions {
		if err := stores[0].EnsureRegion(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[0].SetPacingBound(ctx, fleet.Scope{WorkspaceID: "ws", EnvironmentID: "prod"}, 2, false); err != nil {
		t.Fatal(err)
	}
	// Queued behind a halt, so that all wait at once.
	halt, _, err := stores[1].Halt(ctx, fleet.Scope{}, "queue them all")
	if err != nil {
		t.Fatal(err)
	}
	waves := jsontype.Strategy{Waves: []jsontype.Wave{{Regions: []string{"eu"}}, {Regions: []string{"*"}}}}
	const rollouts = 12
	for i := range rollouts {
		id := fmt.Sprintf("paced-%d", i)
		err := stores[i%len(stores)].Deploy(desired.WithStrategy(ctx, waves), desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod",
			Image: "app:1", CPUMillicores: 10, MemoryMiB: 16}, regions, 1)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := stores[2].Resume(ctx, halt.ID); err != nil {
		t.Fatal(err)
	}
	queued, err := stores[0].InFlight(ctx)
	if err != nil || len(queued) != rollouts {
		t.Fatalf("%d rollouts in flight, %v; want %d queued", len(queued), err, rollouts)
	}
	var wg sync.WaitGroup
	var started, held atomic.Int64
	begin := make(chan struct{})
	for _, r := range queued {
		for _, s := range stores {
			wg.Go(func() {
				<-begin
				err := s.StartRollout(ctx, r.ID, r.Version)
				switch {
				case err == nil:
					started.Add(1)
				case errors.Is(err, desired.ErrConcurrentChange):
					held.Add(1)
				default:
					t.Errorf("start of %s: %v", r.DeploymentID, err)
				}
			})
		}
	}
	close(begin)
	wg.Wait()
	running, err := c.replicas[0].DB.Ent.Rollout.Query().Where(rollout.StateEQ(rollout.StateProgressing)).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d queued rollouts started through %d nodes at once under a bound of 2: %d starts written, %d held; %d progressing",
		rollouts, len(stores), started.Load(), held.Load(), running)
	if running != 2 || started.Load() != 2 {
		t.Errorf("%d rollouts progressing (%d starts written) under a bound of 2; want exactly 2", running, started.Load())
	}
}
