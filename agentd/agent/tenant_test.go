package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The agent keeps the tenant boundary whatever the stream says. A
// deployment streamed into kube-system (written as an older ctrld could,
// before it refused such pairs) and one into a namespace someone else
// created are refused: nothing is written there, each is reported as its
// resource's apply error, not in sync, while the other resources are
// applied, and the region's acked cursor moves past them (it is not held
// for a refusal no retry can change) and keeps moving with later changes.
func TestForeignNamespacesAreRefusedAndTheCursorMovesOn(t *testing.T) {
	e := newAgentEnv(t)
	theirs := naming.Namespace("theirs", "prod")
	if _, err := e.admin.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: theirs}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.CoreV1().Namespaces().Delete(context.Background(), theirs, metav1.DeleteOptions{}) })
	err := store.WithTx(e.ctx, e.ctrld.DB.Ent, func(tx *ent.Tx) error {
		if err := tx.Deployment.Create().SetID("dns").SetWorkspaceID("kube").SetEnvironmentID("system").
			SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).Exec(e.ctx); err != nil {
			return err
		}
		return tx.DeploymentTopology.Create().SetDeploymentID("dns").SetRegion("eu").SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1").Exec(e.ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	deploy(t, e.op, "squatter", "theirs", "eu")
	deploy(t, e.op, "fine", "tenant", "eu")
	_, head := ackedVersion(t, e.op, "eu")
	e.start(t, "agent-0", agent.Config{LeaderElect: false, StatusInterval: 100 * time.Millisecond, ResyncInterval: -1})

	waitFor(t, 20*time.Second, "the other deployment applied and the cursor past the refusals", func() bool {
		acked, _ := ackedVersion(t, e.op, "eu")
		return statefulSetExists(e.admin, naming.Namespace("tenant", "prod"), "fine") && acked >= head
	})
	for id, ns := range map[string]string{"dns": "kube-system", "squatter": theirs} {
		var sync *ctrlv1.ResourceSyncState
		waitFor(t, 10*time.Second, id+"'s refusal reported", func() bool {
			sync = deploymentSync(t, e.op, "eu", id)
			return sync.GetError() != ""
		})
		if !strings.Contains(sync.GetError(), "namespace "+ns) || !strings.Contains(sync.GetError(), "not writing into it") || sync.GetInSync() {
			t.Errorf("%s in %s shows as %v, want not in sync, with the refusal naming the namespace", id, ns, sync)
		}
		if statefulSetExists(e.admin, ns, id) {
			t.Errorf("a StatefulSet was written into %s", ns)
		}
	}
	got, err := e.admin.CoreV1().Namespaces().Get(e.ctx, theirs, metav1.GetOptions{})
	if err != nil || len(got.Labels) > 1 { // only kubernetes.io/metadata.name
		t.Errorf("someone else's namespace was changed: labels %v, %v", got.GetLabels(), err)
	}

	// Later changes are acknowledged as usual.
	deploy(t, e.op, "later", "tenant", "eu")
	_, head = ackedVersion(t, e.op, "eu")
	waitFor(t, 20*time.Second, "a later change acked", func() bool { acked, _ := ackedVersion(t, e.op, "eu"); return acked >= head })
	if _, err := e.admin.AppsV1().StatefulSets("kube-system").Get(e.ctx, "dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("kube-system holds the refused StatefulSet: %v", err)
	}
}

// A namespace an admin takes back while the agent runs (removes the
// managed-by label from it) is no longer the agent's: the next change
// there is refused (reported as the resource's error, nothing written)
// and the cursor moves on; handed back (labeled again), the refused
// change is applied without another event, periodic resyncs off.
func TestANamespaceTakenBackIsRefusedUntilHandedBack(t *testing.T) {
	e := newAgentEnv(t)
	ns := naming.Namespace("takenback", "prod")
	deploy(t, e.op, "api", "takenback", "eu")
	e.start(t, "agent-0", agent.Config{LeaderElect: false, StatusInterval: 100 * time.Millisecond, ResyncInterval: -1,
		NamespaceKnownFor: 100 * time.Millisecond, RefusedRetry: 200 * time.Millisecond})
	waitFor(t, 20*time.Second, "the deployment applied", func() bool { return statefulSetExists(e.admin, ns, "api") })
	t.Cleanup(func() { e.admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	relabel := func(labels map[string]string) {
		t.Helper()
		got, err := e.admin.CoreV1().Namespaces().Get(e.ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Labels = labels
		if _, err := e.admin.CoreV1().Namespaces().Update(e.ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel(nil)
	time.Sleep(200 * time.Millisecond) // past NamespaceKnownFor

	newImage := "app:2"
	if _, err := e.op.UpdateDeployment(e.ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &newImage}); err != nil {
		t.Fatal(err)
	}
	_, head := ackedVersion(t, e.op, "eu")
	waitFor(t, 20*time.Second, "the change refused and reported, the cursor past it", func() bool {
		acked, _ := ackedVersion(t, e.op, "eu")
		sync := deploymentSync(t, e.op, "eu", "api")
		return acked >= head && strings.Contains(sync.GetError(), "namespace "+ns) && !sync.GetInSync()
	})
	image := func() string {
		sts, err := e.admin.AppsV1().StatefulSets(ns).Get(e.ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template.Spec.Containers[0].Image
	}
	if got := image(); got != "app:1" {
		t.Errorf("the namespace taken back was written into: image %s", got)
	}

	relabel(ownedLabels)
	waitFor(t, 20*time.Second, "the refused change applied once handed back", func() bool {
		return image() == "app:2" && deploymentSync(t, e.op, "eu", "api").GetInSync()
	})
}
