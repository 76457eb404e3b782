package agent_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// shippedRules reads the ClusterRole and the leader-election Role from
// deploy/k8s/agentd.yaml.
func shippedRules(t *testing.T) (cluster, leader []rbacv1.PolicyRule) {
	t.Helper()
	f, err := os.Open("../../deploy/k8s/agentd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch obj.GetKind() {
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
				t.Fatal(err)
			}
			if obj.GetKind() == "ClusterRole" {
				cluster = role.Rules
			} else {
				leader = role.Rules
			}
		}
	}
	if cluster == nil || leader == nil {
		t.Fatal("deploy/k8s/agentd.yaml lacks the ClusterRole or the Role")
	}
	return cluster, leader
}

// The shipped RBAC is enough for what the agent does: with only those
// rules (as kubetest.LimitedUser) it takes the lease, watches, applies a
// deployment, a sentinel and a Cilium policy (creating their namespace),
// and deletes them again (the verbs garbage collection uses too).
func TestShippedRoleIsSufficient(t *testing.T) {
	c := isolate(t)
	admin := c.Client(t)
	ctx := context.Background()
	c.InstallCiliumCRD(t)
	clusterRules, leaderRules := shippedRules(t)
	grant(t, admin, "shipped-agentd", clusterRules)
	leaseNS := "deploysync-role-test"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(leaseNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leader"}, Rules: leaderRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(leaseNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leader"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.LimitedUser}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env := servertest.Start(t, server.Config{})
	op := env.Operator("t")
	env.AgentToken("eu")
	ns := naming.Namespace("role", "prod")
	deploy(t, op, "api", "role", "eu")
	if _, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "role", EnvironmentId: "prod",
		Region: "eu", Image: "sentinel:1", Replicas: 1, CpuMillicores: 10, MemoryMib: 16}); err != nil {
		t.Fatal(err)
	}
	spec, _ := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}})
	if _, err := op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "pol", WorkspaceId: "role",
		EnvironmentId: "prod", DeploymentId: "api", Region: "eu", Name: "allow-api", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, env, "eu", "agent-0", c.UserConfig(), agent.Config{LeaderElect: true, LeaseNamespace: leaseNS,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond})

	dyn := dynamic.NewForConfigOrDie(c.Config)
	policyExists := func() bool {
		_, err := dyn.Resource(reconcile.PolicyResource).Namespace(ns).Get(ctx, "allow-api", metav1.GetOptions{})
		return err == nil
	}
	waitFor(t, 30*time.Second, "deployment, sentinel and policy applied", func() bool {
		_, err := admin.AppsV1().Deployments(ns).Get(ctx, naming.Sentinel("gw"), metav1.GetOptions{})
		return statefulSetExists(admin, ns, "api") && err == nil && policyExists()
	})
	if _, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: "api"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.DeleteSentinel(ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: "gw"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "everything deleted", func() bool {
		_, err := admin.AppsV1().Deployments(ns).Get(ctx, naming.Sentinel("gw"), metav1.GetOptions{})
		return !statefulSetExists(admin, ns, "api") && apierrors.IsNotFound(err) && !policyExists()
	})
	if acked, head := ackedVersion(t, op, "eu"); acked < head {
		waitFor(t, 10*time.Second, "cursor acked", func() bool { a, h := ackedVersion(t, op, "eu"); return a >= h })
	}
}

// A kind the agent cannot list (here RBAC does not let it list Cilium
// policies) does not stop garbage collection of the others: a managed
// StatefulSet the full sync did not list (a deployment stopped while the
// agent was away) is deleted all the same, the failure is the region's
// last error on the console, and once the listing is allowed the full sync
// is redone, with periodic resyncs off, and the error clears.
func TestGarbageCollectionGoesOnWhenAKindCannotBeListed(t *testing.T) {
	c := isolate(t)
	admin := c.Client(t)
	ctx := context.Background()
	clusterRules, _ := shippedRules(t)
	var withoutPolicies, policies []rbacv1.PolicyRule
	for _, r := range clusterRules {
		if slices.Contains(r.APIGroups, "cilium.io") {
			policies = append(policies, r)
		} else {
			withoutPolicies = append(withoutPolicies, r)
		}
	}
	if len(policies) == 0 {
		t.Fatal("the shipped role has no cilium.io rule to withhold")
	}
	grant(t, admin, "gc-without-policies", withoutPolicies)

	env := servertest.Start(t, server.Config{})
	op := env.Operator("t")
	env.AgentToken("eu")
	ns := naming.Namespace("gcpartial", "prod")
	deploy(t, op, "listed", "gcpartial", "eu")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ownedLabels}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stopped := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "stopped", Namespace: ns,
		Labels: map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: "stopped"}},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "stopped"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": "stopped"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x:1"}}}},
		}}
	if _, err := admin.AppsV1().StatefulSets(ns).Create(ctx, stopped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, env, "eu", "agent-0", c.UserConfig(), agent.Config{LeaderElect: false, ResyncInterval: -1})

	waitFor(t, 20*time.Second, "the unlisted StatefulSet collected, the listed one applied", func() bool {
		_, err := admin.AppsV1().StatefulSets(ns).Get(ctx, "stopped", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && statefulSetExists(admin, ns, "listed")
	})
	waitFor(t, 10*time.Second, "the failed listing shown as the region's last error and full sync error", func() bool {
		r := regionOverview(t, op, "eu")
		return strings.Contains(r.LastError, "ciliumnetworkpolicies") && strings.Contains(r.LastFullSyncError, "ciliumnetworkpolicies")
	})
	if r := regionOverview(t, op, "eu"); r.LastFullSync != nil {
		t.Errorf("the console shows a completed full sync (%s) while its garbage collection is incomplete", r.LastFullSync.AsTime())
	}
	grant(t, admin, "gc-policies", policies)
	waitFor(t, 30*time.Second, "the redone full sync clears the errors and is shown as done", func() bool {
		r := regionOverview(t, op, "eu")
		return r.LastError == "" && r.LastFullSyncError == "" && r.LastFullSync != nil
	})
}

func regionLastError(t *testing.T, op ctrlv1.OperatorServiceClient, region string) string {
	t.Helper()
	return regionOverview(t, op, region).LastError
}

func regionOverview(t *testing.T, op ctrlv1.OperatorServiceClient, region string) *ctrlv1.RegionOverview {
	t.Helper()
	regions, err := op.ListRegions(context.Background(), &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regions.Regions {
		if r.Region == region {
			return r
		}
	}
	t.Fatalf("region %s not listed", region)
	return nil
}

// Live views read Pods, their logs and events, and may do nothing else
// with them: the shipped role grants exactly get, list and watch on each
// (issue 31), in the core group only.
func TestShippedRoleOnlyReadsPodsLogsAndEvents(t *testing.T) {
	clusterRules, _ := shippedRules(t)
	want := []string{"get", "list", "watch"}
	for _, resource := range []string{"pods", "pods/log", "events"} {
		var verbs []string
		for _, r := range clusterRules {
			if slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*") {
				if !slices.Equal(r.APIGroups, []string{""}) {
					t.Errorf("%s granted in API groups %v, want the core group only", resource, r.APIGroups)
				}
				verbs = append(verbs, r.Verbs...)
			}
		}
		slices.Sort(verbs)
		if !slices.Equal(verbs, want) {
			t.Errorf("the shipped role grants %v on %s, want exactly %v", verbs, resource, want)
		}
	}
	// Nothing that reaches into a container or a node: a live view is a
	// read, never a session.
	for _, r := range clusterRules {
		for _, resource := range r.Resources {
			if slices.Contains([]string{"pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "nodes/proxy", "services/proxy", "*"}, resource) {
				t.Errorf("the shipped role grants %v on %s", r.Verbs, resource)
			}
		}
	}
}
