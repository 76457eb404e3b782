package convergecheck

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/checks"
	"github.com/deploysync/deploysync/agentd/kube"
	agentmetrics "github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/rolloutcheck"
	"github.com/deploysync/deploysync/internal/testmariadb"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Regions are the checker's regions: one cluster and one agent each.
var Regions = []string{"eu", "us"}

// Setup is what a System runs on.
type Setup struct {
	// Clusters has a control plane for every region in Regions. Start
	// first removes the managed objects an earlier run left in them.
	Clusters map[string]*kubetest.Cluster
	// DropDeletes breaks the system on purpose: no delete event reaches an
	// agent. Only the test that proves the checker can fail sets it.
	DropDeletes bool
	// MariaDB, when set, is a server of the checker's own that ctrld's
	// database lives on, so a fault may restart it (the shared test server
	// is never restarted: other test packages use it at the same time).
	MariaDB *testmariadb.Server
	// Galera, when set instead, is a Galera cluster of the checker's own:
	// ctrld runs on its first node, the second replica the replica fault
	// starts on another node, and the MariaDB restart fault kills and
	// restarts a node, any of them.
	Galera *testmariadb.Galera
	// Logf reports progress (default: nothing).
	Logf func(format string, args ...any)
}

// System is the whole deployment pipeline under test.
type System struct {
	t         testing.TB
	env       *servertest.Env
	regions   map[string]*region
	control   ctrlv1.OperatorServiceClient   // the fault schedule's: pause, resume, resync
	operators []ctrlv1.OperatorServiceClient // one per concurrent operator
	// fleet are the fleet operator's clients: on the main ctrld and on a
	// replica of its own (with Galera, on the second node), which runs
	// beside it all along: the fleet's controls act through either, and
	// two drivers start waves under them.
	fleet []ctrlv1.OperatorServiceClient
	// model is what the fleet operator did, observer what the database
	// recorded of the rollouts: the fleet verdicts' inputs, over the run.
	model    *fleetModel
	observer *observer
	mariadb  *testmariadb.Server
	galera   *testmariadb.Galera
	database string // ctrld's database's name

	retentionRows int64 // change rows the retention fault deleted
	logf          func(format string, args ...any)

	// Slow restarts run beside the schedule; a round waits for them, and
	// so does Start's cleanup, after ending slowCtx, should a test end
	// during one.
	slow              sync.WaitGroup
	slowCtx           context.Context
	stopSlow          context.CancelFunc
	slowMu            sync.Mutex
	slowErr           error
	mariadbRestarting atomic.Bool
	dbOutage          outage // the main ctrld's database down on purpose
}

// outage is how long a fault has ctrld's database down: from the kill
// until a moment after the server is back (ctrld's pools reconnect and
// its tailer polls again).
type outage struct {
	mu   sync.Mutex
	down int       // restarts under way
	upAt time.Time // when the last one ended
}

// outageTail is how long after the database is back calls may still find
// ctrld unavailable: the tailer's next successful poll.
const outageTail = 2 * time.Second

func (o *outage) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down++
}

func (o *outage) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down--
	o.upAt = time.Now()
}

// now tells whether the database is down, or was a moment ago.
func (o *outage) now() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.down > 0 || (!o.upAt.IsZero() && time.Since(o.upAt) < outageTail)
}

// region is one region's cluster and agent, and how the agent reaches ctrld.
type region struct {
	name        string
	cluster     *kubetest.Cluster
	clients     agent.Clients
	token       string
	primary     ctrlv1.ClusterServiceClient // the restartable main ctrld
	link        *link
	replica     *server.Server   // the second ctrld serving the agent, while moved
	replicaDB   *store.DB        // replica's own pools, when on another Galera node
	replicaConn *grpc.ClientConn // the agent's connection to replica
	agent       *agentRun        // nil while killed

	restarting atomic.Bool // the API server is being restarted
	// images is every image the region's StatefulSets carried, from the
	// API server's own watch (the rollout verdict reads it).
	images *rolloutcheck.ImageLog
	// metrics is the region's traffic simulator and Prometheus, which
	// its agent evaluates the rollouts' checks against.
	metrics *regionMetrics
}

type agentRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when agent.Run has returned, with err
	err    error
}

// exited tells why the agent stopped by itself, if it did.
func (a *agentRun) exited() (bool, error) {
	select {
	case <-a.done:
		return true, a.err
	default:
		return false, nil
	}
}

// maxOperators is how many operators may run at once.
const maxOperators = 3

// Start runs ctrld on a fresh database and one agent per region, on
// clusters cleaned of managed objects. Everything stops when t ends.
func Start(t testing.TB, setup Setup) *System {
	t.Helper()
	switch {
	case setup.MariaDB != nil:
		t.Setenv("DEPLOYSYNC_TEST_MYSQL_DSN", setup.MariaDB.DSN)
	case setup.Galera != nil:
		t.Setenv("DEPLOYSYNC_TEST_MYSQL_DSN", setup.Galera.Nodes[0].DSN)
	}
	// Each region's Prometheus takes seconds to start: they start beside
	// ctrld and the clusters' cleaning.
	metricsCtx, stopMetrics := context.WithCancel(context.Background())
	t.Cleanup(stopMetrics)
	started := map[string]chan metricsStart{}
	for _, name := range Regions {
		c := setup.Clusters[name]
		if c == nil {
			t.Fatalf("convergecheck: no cluster for region %s", name)
		}
		ch := make(chan metricsStart, 1)
		started[name] = ch
		go func() {
			clients, err := agent.ClientsFor(c.Config)
			if err != nil {
				ch <- metricsStart{err: err}
				return
			}
			m, stop, err := startMetrics(metricsCtx, clients.Kube)
			ch <- metricsStart{m, stop, err}
		}()
	}
	for _, name := range Regions {
		t.Cleanup(func() {
			if st := <-started[name]; st.stop != nil {
				st.stop()
			}
		})
	}
	env := servertest.Start(t, server.Config{})
	s := &System{t: t, env: env, regions: map[string]*region{}, control: env.Operator("faults"), mariadb: setup.MariaDB,
		galera: setup.Galera, logf: setup.Logf}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if err := env.DB.SQL.QueryRow("SELECT DATABASE()").Scan(&s.database); err != nil {
		t.Fatal(err)
	}
	for i := range maxOperators {
		s.operators = append(s.operators, env.Operator(operatorName(i)))
	}
	fleetToken := env.OperatorToken(fleetName)
	s.fleet = append(s.fleet, ctrlv1.NewOperatorServiceClient(env.Dial(fleetToken)))
	replicaDB := env.DB
	if s.galera != nil {
		db, err := s.galeraNodeDB(1)
		if err != nil {
			t.Fatalf("convergecheck: the fleet's replica on Galera node 2: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		replicaDB = db
	}
	replica := env.StartReplicaOn(replicaDB)
	s.fleet = append(s.fleet, ctrlv1.NewOperatorServiceClient(servertest.Dial(t, replica.Addr, fleetToken)))
	ctx := context.Background()
	for _, name := range Regions {
		c := setup.Clusters[name]
		clients, err := agent.ClientsFor(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		c.InstallCiliumCRD(t)
		if err := clean(ctx, clients); err != nil {
			t.Fatalf("convergecheck: clean the %s cluster: %v", name, err)
		}
		token := env.AgentToken(name)
		primary := ctrlv1.NewClusterServiceClient(servertest.Dial(t, env.Server.Addr, token))
		r := &region{name: name, cluster: c, clients: clients,
			token: token, primary: primary, link: newLink(primary, setup.DropDeletes)}
		watchCtx, stopWatch := context.WithCancel(context.Background())
		t.Cleanup(stopWatch)
		if r.images, err = rolloutcheck.WatchImages(watchCtx, name, clients.Kube); err != nil {
			t.Fatal(err)
		}
		st := <-started[name]
		started[name] <- st // for the cleanup
		if st.err != nil {
			t.Fatalf("convergecheck: %s's traffic simulator and Prometheus: %v", name, st.err)
		}
		r.metrics = st.metrics
		s.regions[name] = r
		r.startAgent()
		t.Cleanup(func() { r.stopAgent() })
	}
	// Registered last, so it runs first: no restart may outlive the test,
	// nor meet the database, ctrld or the clusters being stopped.
	s.slowCtx, s.stopSlow = context.WithCancel(context.Background())
	t.Cleanup(func() {
		s.stopSlow()
		s.slow.Wait()
	})
	return s
}

// metricsStart is a region's traffic simulator and Prometheus, started,
// with what stops them.
type metricsStart struct {
	metrics *regionMetrics
	stop    func()
	err     error
}

// startAgent runs the region's agent with its one identity, as a restarted
// agentd process would: same region, same identity, new process state.
// Periodic resync is off, so only the stream and forced resyncs repair.
// It reports false when the agent already runs.
func (r *region) startAgent() bool {
	if r.agent != nil {
		return false
	}
	cfg := agent.Config{
		Region: r.name, Identity: "agent-" + r.name,
		ResyncInterval:    -1, // off
		BackoffMin:        50 * time.Millisecond,
		BackoffMax:        500 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond,
		// Room for every rollout's check at once (five deployments), so
		// each is evaluated at every call (the checks verdict assumes no
		// cadence, but the gate is quicker so).
		Checks: checks.Config{PrometheusURL: r.metrics.prom.URL(), Timeout: 2 * time.Second, Concurrency: 2 * len(deploymentIDs)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &agentRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.err = agent.Run(ctx, cfg, r.clients, r.link, servertest.Logger(), agentmetrics.New(prometheus.NewRegistry()))
	}()
	r.agent = run
	return true
}

// stopAgent kills the region's agent (cancels it, as SIGTERM would) and
// waits until it has stopped. It reports false when no agent ran.
func (r *region) stopAgent() bool {
	if r.agent == nil {
		return false
	}
	r.agent.cancel()
	<-r.agent.done
	r.agent = nil
	return true
}

// managedKind is a kind agentd applies: how to list its managed objects in
// every namespace, and delete one.
type managedKind struct {
	kind   string
	list   func(ctx context.Context, c agent.Clients) ([]metav1.Object, error)
	delete func(ctx context.Context, c agent.Clients, ns, name string) error
}

// managedKinds are the kinds agentd applies.
var managedKinds = []managedKind{
	kindOf("StatefulSet",
		func(c agent.Clients, ns string) resource[*appsv1.StatefulSetList] {
			return c.Kube.AppsV1().StatefulSets(ns)
		},
		func(l *appsv1.StatefulSetList) []appsv1.StatefulSet { return l.Items }),
	kindOf("Service",
		func(c agent.Clients, ns string) resource[*corev1.ServiceList] { return c.Kube.CoreV1().Services(ns) },
		func(l *corev1.ServiceList) []corev1.Service { return l.Items }),
	kindOf("Deployment",
		func(c agent.Clients, ns string) resource[*appsv1.DeploymentList] {
			return c.Kube.AppsV1().Deployments(ns)
		},
		func(l *appsv1.DeploymentList) []appsv1.Deployment { return l.Items }),
	kindOf("CiliumNetworkPolicy",
		func(c agent.Clients, ns string) resource[*unstructured.UnstructuredList] {
			return dynamicResource{c.Dynamic.Resource(reconcile.PolicyResource).Namespace(ns)}
		},
		func(l *unstructured.UnstructuredList) []unstructured.Unstructured { return l.Items }),
}

// resource is one kind's client in one namespace ("" lists in all).
type resource[L any] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// dynamicResource is a dynamic client as a resource (its Delete also takes
// subresources).
type dynamicResource struct{ dynamic.ResourceInterface }

func (r dynamicResource) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.ResourceInterface.Delete(ctx, name, opts)
}

// kindOf makes a managedKind of a client and how to take a list's items.
func kindOf[L, T any, PT interface {
	*T
	metav1.Object
}](kind string, client func(c agent.Clients, ns string) resource[L], items func(L) []T) managedKind {
	return managedKind{
		kind: kind,
		list: func(ctx context.Context, c agent.Clients) ([]metav1.Object, error) {
			l, err := client(c, "").List(ctx, managedOnly)
			if err != nil {
				return nil, err
			}
			return objects[T, PT](items(l)), nil
		},
		delete: func(ctx context.Context, c agent.Clients, ns, name string) error {
			return client(c, ns).Delete(ctx, name, metav1.DeleteOptions{})
		},
	}
}

var managedOnly = metav1.ListOptions{LabelSelector: kube.ManagedSelector}

// objects takes a list's Items, values, to their metadata.
func objects[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// clean deletes every managed object, so a run starts from an empty
// cluster whatever the clusters' earlier users left, and waits until they
// are gone.
func clean(ctx context.Context, c agent.Clients) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for _, k := range managedKinds {
			objs, err := k.list(ctx, c)
			if err != nil {
				return err
			}
			for _, o := range objs {
				left++
				if err := k.delete(ctx, c, o.GetNamespace(), o.GetName()); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("delete %s %s/%s: %w", k.kind, o.GetNamespace(), o.GetName(), err)
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d managed objects still there after 30s", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
