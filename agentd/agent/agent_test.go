package agent_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/testmetrics"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// apiCluster serves the tests that need no running Pods.
var apiCluster = kubetest.Shared{}

// isolate gives a test the shared cluster and removes every managed object
// once the test's agents have stopped: an agent garbage-collects what its
// full sync does not list, and that must not be another test's leftovers.
func isolate(t *testing.T) *kubetest.Cluster {
	t.Helper()
	c := apiCluster.Get(t)
	admin := c.Client(t)
	t.Cleanup(func() {
		ctx := context.Background()
		opts := metav1.ListOptions{LabelSelector: kube.ManagedSelector}
		sets, _ := admin.AppsV1().StatefulSets("").List(ctx, opts)
		for _, o := range sets.Items {
			admin.AppsV1().StatefulSets(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
		svcs, _ := admin.CoreV1().Services("").List(ctx, opts)
		for _, o := range svcs.Items {
			admin.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
		deps, _ := admin.AppsV1().Deployments("").List(ctx, opts)
		for _, o := range deps.Items {
			admin.AppsV1().Deployments(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
		// Fails harmlessly when no test installed the CRD.
		policies := dynamic.NewForConfigOrDie(c.Config).Resource(reconcile.PolicyResource)
		if list, err := policies.List(ctx, opts); err == nil {
			for _, o := range list.Items {
				policies.Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			}
		}
	})
	return c
}

// ownedLabels hand a namespace to the agent: it writes only into
// namespaces labeled so (see reconcile.Namespaces).
var ownedLabels = map[string]string{kube.ManagedByLabel: kube.ManagedByValue}

// countedConfig is c's admin config with its writes counted, leases aside
// (leader election renews its lease all the time).
func countedConfig(c *kubetest.Cluster) (*rest.Config, *kubetest.WriteCounter) {
	counter := &kubetest.WriteCounter{Ignore: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/leases") }}
	return counter.Wrap(c.Config), counter
}

func deploy(t *testing.T, op ctrlv1.OperatorServiceClient, id, workspace string, regions ...string) {
	t.Helper()
	_, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: workspace, EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: regions, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
}

func statefulSetExists(client kubernetes.Interface, ns, name string) bool {
	_, err := client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

func ackedVersion(t *testing.T, op ctrlv1.OperatorServiceClient, region string) (acked, head uint64) {
	r := regionOverview(t, op, region) // fails the test for a region not listed
	return r.AckedVersion, r.HeadVersion
}

// A periodic full resync of unchanged state makes no API writes.
func TestNoOpResyncWritesNothing(t *testing.T) {
	e := newAgentEnv(t)
	kcfg, counter := countedConfig(e.cluster)
	client := kubernetes.NewForConfigOrDie(kcfg)
	for _, id := range []string{"a", "b", "c"} {
		deploy(t, e.op, id, "noop", "eu")
	}
	reg := prometheus.NewRegistry()
	startMeteredAgent(t, e.ctrld, "eu", "agent-0", kcfg, agent.Config{LeaderElect: false, ResyncInterval: 500 * time.Millisecond}, reg)
	ns := naming.Namespace("noop", "prod")
	waitFor(t, 20*time.Second, "three statefulsets", func() bool {
		return statefulSetExists(client, ns, "a") && statefulSetExists(client, ns, "b") && statefulSetExists(client, ns, "c")
	})
	time.Sleep(time.Second) // let the first applies settle in the cache
	before, syncs := counter.Writes(), testmetrics.Value(t, reg, "agentd_full_syncs_total")
	time.Sleep(2500 * time.Millisecond) // several full resyncs
	if n := counter.Writes() - before; n != 0 {
		t.Fatalf("resyncs of unchanged state made %d API writes", n)
	}
	if n := testmetrics.Value(t, reg, "agentd_full_syncs_total") - syncs; n < 2 {
		t.Fatalf("only %v full resyncs in the window; the test proves nothing", n)
	}
}

// A replica starting its term reports no acked version before it has
// acknowledged one, so the region's acked cursor does not drop to 0 (the
// whole retained log shown as lag) while it is still in its first full
// sync after a failover.
func TestNewTermKeepsTheRegionsAckedCursor(t *testing.T) {
	e := newAgentEnv(t)
	deploy(t, e.op, "one", "failover", "eu")
	stopFirst := e.start(t, "replica-a", agent.Config{LeaderElect: false})
	_, head := ackedVersion(t, e.op, "eu")
	waitFor(t, 20*time.Second, "replica-a acked", func() bool { acked, _ := ackedVersion(t, e.op, "eu"); return acked >= head })
	stopFirst()
	before, _ := ackedVersion(t, e.op, "eu")

	// replica-b's first full sync has a deployment to write, and its
	// writes are slow: seconds before it acknowledges anything.
	deploy(t, e.op, "two", "failover", "eu")
	startAgent(t, e.ctrld, "eu", "replica-b", slowWrites(e.cluster.Config, time.Second), agent.Config{LeaderElect: false})
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if acked, _ := ackedVersion(t, e.op, "eu"); acked < before {
			t.Fatalf("the region's acked cursor went back from %d to %d when replica-b started", before, acked)
		}
	}
	_, head = ackedVersion(t, e.op, "eu")
	waitFor(t, 20*time.Second, "replica-b acked", func() bool { acked, _ := ackedVersion(t, e.op, "eu"); return acked >= head })
}

// slowWrites is cfg with every request that changes state delayed.
func slowWrites(cfg *rest.Config, delay time.Duration) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				select {
				case <-r.Context().Done():
					return nil, r.Context().Err()
				case <-time.After(delay):
				}
			}
			return next.RoundTrip(r)
		})
	})
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An apply the API server refuses (here: RBAC does not yet allow patching
// StatefulSets) holds the acked cursor and is retried; once allowed, it
// succeeds and the cursor moves on.
func TestFailingApplyHoldsCursorAndRetries(t *testing.T) {
	e := newAgentEnv(t)
	ns := naming.Namespace("rbac", "prod")
	grantAllButStatefulSetWrites(t, e.admin)
	startAgent(t, e.ctrld, "eu", "agent-0", e.cluster.UserConfig(), agent.Config{LeaderElect: false})
	deploy(t, e.op, "blocked", "rbac", "eu")
	_, head := ackedVersion(t, e.op, "eu")
	time.Sleep(2 * time.Second) // several retries
	if acked, _ := ackedVersion(t, e.op, "eu"); acked >= head {
		t.Fatalf("cursor %d acked past a failing apply (head %d)", acked, head)
	}
	if lastError := regionLastError(t, e.op, "eu"); !strings.Contains(lastError, "blocked") {
		t.Errorf("the failing resource is not visible in the region's last error: %q", lastError)
	}
	grantStatefulSetWrites(t, e.admin)
	waitFor(t, 30*time.Second, "apply retried once allowed", func() bool { return statefulSetExists(e.admin, ns, "blocked") })
	waitFor(t, 10*time.Second, "cursor acked", func() bool { acked, _ := ackedVersion(t, e.op, "eu"); return acked >= head })
}

// grantAllButStatefulSetWrites lets kubetest.LimitedUser do what an agent
// does except create or patch StatefulSets: every deployment's apply fails
// in the API server, until grantStatefulSetWrites.
func grantAllButStatefulSetWrites(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	grant(t, admin, "agent-reads", []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		// A server-side apply that creates needs create as well as patch.
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "patch"}},
	})
}

func grantStatefulSetWrites(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	grant(t, admin, "agent-writes-statefulsets", []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"create", "patch"}},
	})
}

// An apply the API server refuses shows in ctrld's operator API as that
// resource's sync error, with since when, and as the reason its region is
// not in sync; once the cause is gone, the error clears and the resource
// is in sync at the version the agent applied.
func TestAFailingApplyShowsItsErrorInTheRegion(t *testing.T) {
	e := newAgentEnv(t)
	grantAllButStatefulSetWrites(t, e.admin)
	startAgent(t, e.ctrld, "eu", "agent-0", e.cluster.UserConfig(), agent.Config{LeaderElect: false, StatusInterval: 100 * time.Millisecond})
	deploy(t, e.op, "blocked", "syncerr", "eu")

	var sync *ctrlv1.ResourceSyncState
	waitFor(t, 30*time.Second, "the failing apply in the region's view", func() bool {
		sync = deploymentSync(t, e.op, "eu", "blocked")
		return sync.GetError() != ""
	})
	if !strings.Contains(sync.GetError(), "forbidden") || sync.GetInSync() || sync.GetFailingSince() == nil {
		t.Fatalf("the failing resource shows as %v, want out of sync, failing since a time, with the API server's refusal", sync)
	}
	overview := regionOverview(t, e.op, "eu")
	if overview.FailingResources != 1 || !slices.ContainsFunc(overview.NotInSync, func(r *ctrlv1.SyncReason) bool {
		return r.Code == "apply_failing" && r.Resource == "deployment/blocked"
	}) {
		t.Fatalf("the region shows %d failing resources and reasons %v, want deployment/blocked's apply failing", overview.FailingResources, overview.NotInSync)
	}

	grantStatefulSetWrites(t, e.admin)
	waitFor(t, 30*time.Second, "the error cleared once the apply succeeds", func() bool {
		sync = deploymentSync(t, e.op, "eu", "blocked")
		return sync.GetError() == "" && sync.GetInSync()
	})
	if _, head := ackedVersion(t, e.op, "eu"); sync.GetAppliedVersion() == 0 || sync.GetAppliedVersion() > head || sync.GetFailingSince() != nil {
		t.Fatalf("the applied resource shows as %v, want in sync at a version up to the head (%d)", sync, head)
	}
	if n := regionOverview(t, e.op, "eu").FailingResources; n != 0 {
		t.Fatalf("the region still shows %d failing resources", n)
	}
}

// deploymentSync is the agent-reported sync state of a deployment in a
// region, as the operator API shows it.
func deploymentSync(t *testing.T, op ctrlv1.OperatorServiceClient, region, id string) *ctrlv1.ResourceSyncState {
	t.Helper()
	r, err := op.GetRegion(context.Background(), &ctrlv1.GetRegionRequest{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Deployments {
		if d.DeploymentId == id {
			return d.Sync
		}
	}
	t.Fatalf("deployment %s not in region %s", id, region)
	return nil
}

// grant gives kubetest.LimitedUser the rules cluster-wide.
func grant(t *testing.T, admin kubernetes.Interface, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.LimitedUser}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// After the full sync the agent deletes exactly the managed objects it
// did not list in its own namespaces; unmanaged ones stay, and so do
// objects carrying its labels in someone else's namespace (labeled by
// someone who may patch them but not delete them).
func TestGarbageCollectionAfterFullSync(t *testing.T) {
	e := newAgentEnv(t)
	ns, foreign := naming.Namespace("gc", "prod"), e.cluster.Namespace(t)
	deploy(t, e.op, "listed", "gc", "eu")
	if _, err := e.admin.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ownedLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sts := func(name string, labels map[string]string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x:1"}}}},
			}}
	}
	labeledInTheirs := sts("labeled", map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: "labeled"})
	labeledInTheirs.Namespace = foreign
	for _, o := range []*appsv1.StatefulSet{
		sts("orphan", map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: "orphan"}),
		sts("theirs", map[string]string{kube.DeploymentLabel: "theirs"}),
		labeledInTheirs,
	} {
		if _, err := e.admin.AppsV1().StatefulSets(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, "agent-0", agent.Config{LeaderElect: false})
	waitFor(t, 20*time.Second, "orphan collected, listed applied", func() bool {
		_, err := e.admin.AppsV1().StatefulSets(ns).Get(e.ctx, "orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && statefulSetExists(e.admin, ns, "listed")
	})
	if !statefulSetExists(e.admin, ns, "theirs") {
		t.Fatal("garbage collection deleted an unmanaged object")
	}
	time.Sleep(time.Second) // garbage collection queues its deletes together; let the rest run
	if !statefulSetExists(e.admin, foreign, "labeled") {
		t.Fatal("garbage collection deleted a labeled object in someone else's namespace")
	}
}

// Two replicas: only the lease holder applies; when it stops, the other
// takes over.
func TestLeaderElection(t *testing.T) {
	e := newAgentEnv(t)
	ns := naming.Namespace("ha", "prod")
	fast := agent.Config{LeaderElect: true, LeaseNamespace: "default",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond}
	stopFirst := e.start(t, "replica-a", fast)
	waitFor(t, 10*time.Second, "replica-a leads", func() bool { return leaseHolder(e.admin) == "replica-a" })
	standby := fast
	standby.Readiness = &agent.Readiness{}
	standbyConfig, standbyWrites := countedConfig(e.cluster)
	startAgent(t, e.ctrld, "eu", "replica-b", standbyConfig, standby)
	waitFor(t, 5*time.Second, "the standby replica is ready (to take over)", func() bool { return standby.Readiness.Ready() == nil })

	deploy(t, e.op, "one", "ha", "eu")
	waitFor(t, 20*time.Second, "leader applied", func() bool { return statefulSetExists(e.admin, ns, "one") })
	if leaseHolder(e.admin) != "replica-a" {
		t.Fatalf("lease moved to %q while the leader was healthy", leaseHolder(e.admin))
	}
	if n := standbyWrites.Writes(); n != 0 {
		t.Fatalf("the standby replica made %d API writes while replica-a led", n)
	}
	stopFirst()
	waitFor(t, 15*time.Second, "replica-b leads", func() bool { return leaseHolder(e.admin) == "replica-b" })
	deploy(t, e.op, "two", "ha", "eu")
	waitFor(t, 20*time.Second, "new leader applied", func() bool { return statefulSetExists(e.admin, ns, "two") })
	if standbyWrites.Writes() == 0 {
		t.Fatal("replica-b's writes were not counted once it led")
	}
}

// /readyz: the applying agent is ready once its stream is up and a full
// sync is done, not while ctrld is gone, and again once it is back.
func TestReadinessFollowsTheStream(t *testing.T) {
	c := isolate(t)
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	r := &agent.Readiness{}
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("before the agent runs: want \"starting\", got %v", err)
	}
	startAgent(t, env, "eu", "solo", c.Config, agent.Config{Readiness: r})
	waitFor(t, 10*time.Second, "ready after the full sync", func() bool { return r.Ready() == nil })

	env.Server.Stop()
	waitFor(t, 10*time.Second, "not ready while ctrld is gone", func() bool {
		err := r.Ready()
		return err != nil && strings.Contains(err.Error(), "not streaming from ctrld")
	})
	env.Restart()
	waitFor(t, 10*time.Second, "ready again once ctrld is back", func() bool { return r.Ready() == nil })
}

// A completed full sync is reported at once, not at the next periodic
// heartbeat: after a forced resync the console's last full sync moves
// within seconds even with a heartbeat interval of a minute.
func TestCompletedFullSyncIsReportedAtOnce(t *testing.T) {
	e := newAgentEnv(t)
	e.start(t, "agent-0", agent.Config{LeaderElect: false, HeartbeatInterval: time.Minute})
	waitFor(t, 10*time.Second, "the first full sync reported", func() bool { return regionOverview(t, e.op, "eu").LastFullSync != nil })
	first := regionOverview(t, e.op, "eu").LastFullSync.AsTime()

	if _, err := e.op.ForceResync(e.ctx, &ctrlv1.ForceResyncRequest{Region: "eu"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the forced full sync reported", func() bool {
		return regionOverview(t, e.op, "eu").LastFullSync.AsTime().After(first)
	})
}

func leaseHolder(client kubernetes.Interface) string {
	l, err := client.CoordinationV1().Leases("default").Get(context.Background(), "agentd-eu", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Drift: a managed object deleted or edited out of band is put back, from
// the informer event alone (no resync, no new change).
func TestOutOfBandChangesArePutBack(t *testing.T) {
	e := newAgentEnv(t)
	ns := naming.Namespace("drift", "prod")
	deploy(t, e.op, "api", "drift", "eu")
	e.start(t, "agent-0", agent.Config{LeaderElect: false, ResyncInterval: -1})
	waitFor(t, 20*time.Second, "applied", func() bool { return statefulSetExists(e.admin, ns, "api") })

	if err := e.admin.AppsV1().StatefulSets(ns).Delete(e.ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "deleted statefulset put back", func() bool { return statefulSetExists(e.admin, ns, "api") })

	sts, err := e.admin.AppsV1().StatefulSets(ns).Get(e.ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	five := int32(5)
	sts.Spec.Replicas = &five
	if _, err := e.admin.AppsV1().StatefulSets(ns).Update(e.ctx, sts, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "edited replicas put back", func() bool {
		s, err := e.admin.AppsV1().StatefulSets(ns).Get(e.ctx, "api", metav1.GetOptions{})
		return err == nil && *s.Spec.Replicas == 1
	})
}
