package status

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// lastStatus keeps the last status reported of each deployment.
type lastStatus struct {
	ctrlv1.ClusterServiceClient
	mu   sync.Mutex
	last map[string]*ctrlv1.DeploymentStatus
}

func (c *lastStatus) ReportDeploymentStatus(_ context.Context, req *ctrlv1.ReportDeploymentStatusRequest, _ ...grpc.CallOption) (*ctrlv1.ReportDeploymentStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range req.GetDeployments() {
		c.last[d.GetDeploymentId()] = proto.CloneOf(d)
	}
	return &ctrlv1.ReportDeploymentStatusResponse{}, nil
}

func (c *lastStatus) instances(id string) []*ctrlv1.Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := slices.Clone(c.last[id].GetInstances())
	slices.SortFunc(in, func(a, b *ctrlv1.Instance) int { return strings.Compare(a.GetPodName(), b.GetPodName()) })
	return in
}

func show(in []*ctrlv1.Instance) string {
	var b strings.Builder
	for _, i := range in {
		fmt.Fprintf(&b, "[%s hash=%q ready=%v status=%v reason=%q restarts=%d] ", i.GetPodName(), i.GetSpecHash(),
			i.GetReady(), i.GetStatus(), i.GetReason(), i.GetRestarts())
	}
	return b.String()
}

// TestReportsWhyPodsAreNotReadyOnARealCluster applies deployments through
// the agent's controller to a real API server whose kwok fails the Pods of
// some images (kubetest.CrashLoopTag, kubetest.BadPullTag), and reads what
// the reporter tells ctrld: a good image's Pods ready, Running, with the
// spec hash their deployment was applied with and no reason; a
// crash-looping image's not ready, CrashLoopBackOff, their restarts
// rising; an image that cannot be pulled ErrImagePull and ImagePullBackOff
// in turn. An update to a crash-looping image rolls one Pod (the
// StatefulSet waits for it to be ready before the next), which then
// carries the new hash and its reason beside one still running the old.
func TestReportsWhyPodsAreNotReadyOnARealCluster(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{Workloads: true})
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(cluster.Dir, "kwok.log")); err == nil {
				t.Logf("kwok's log:\n%s", b[max(0, len(b)-6000):])
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := cluster.NamespaceLabeled(t, map[string]string{kube.ManagedByLabel: kube.ManagedByValue})
	client := cluster.Client(t)
	cache := reconcile.NewCache(client, 0)
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deps := reconcile.NewDeployments(client, cache, reconcile.NewNamespaces(client, naming.Reserved{}))
	apply := func(id, image, hash string, replicas int32) {
		t.Helper()
		if err := deps.Apply(ctx, &ctrlv1.DeploymentState{DeploymentId: id, Namespace: ns, Image: image, Replicas: replicas,
			CpuMillicores: 100, MemoryMib: 64, Port: 8080, SpecHash: hash}); err != nil {
			t.Fatal(err)
		}
	}
	ctrld := &lastStatus{last: map[string]*ctrlv1.DeploymentStatus{}}
	go New(ctrld, "eu", cache, 100*time.Millisecond, slog.New(slog.DiscardHandler)).Run(ctx)

	apply("api", "ghcr.io/acme/api:v1", "rev1", 2)
	apply("crash", "ghcr.io/acme/api:"+kubetest.CrashLoopTag, "rev7", 2)
	apply("pull", "ghcr.io/acme/api:"+kubetest.BadPullTag, "rev9", 1)

	// waitUntil waits for what is reported of deployment id to satisfy ok.
	waitUntil := func(id, what string, ok func([]*ctrlv1.Instance) bool) []*ctrlv1.Instance {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			in := ctrld.instances(id)
			if ok(in) {
				return in
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never reported %s; last report: %s", id, what, show(in))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	all := func(n int, each func(*ctrlv1.Instance) bool) func([]*ctrlv1.Instance) bool {
		return func(in []*ctrlv1.Instance) bool {
			return len(in) == n && !slices.ContainsFunc(in, func(i *ctrlv1.Instance) bool { return !each(i) })
		}
	}
	healthy := func(hash string) func(*ctrlv1.Instance) bool {
		return func(i *ctrlv1.Instance) bool {
			return i.GetReady() && i.GetStatus() == ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING && i.GetReason() == "" &&
				i.GetSpecHash() == hash && i.GetRestarts() == 0
		}
	}
	crashing := func(hash string, restarts int32) func(*ctrlv1.Instance) bool {
		return func(i *ctrlv1.Instance) bool {
			return !i.GetReady() && i.GetStatus() == ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING &&
				i.GetReason() == ReasonCrashLoopBackOff && i.GetSpecHash() == hash && i.GetRestarts() >= restarts
		}
	}
	pulling := func(reason string) func(*ctrlv1.Instance) bool {
		return func(i *ctrlv1.Instance) bool {
			return !i.GetReady() && i.GetStatus() == ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING &&
				i.GetReason() == reason && i.GetSpecHash() == "rev9"
		}
	}

	waitUntil("api", "2 ready instances of rev1", all(2, healthy("rev1")))
	first := waitUntil("crash", "2 instances crash-looping", all(2, crashing("rev7", 1)))
	waitUntil("crash", "restarts rising", all(2, crashing("rev7", first[0].GetRestarts()+2)))
	waitUntil("pull", "ErrImagePull", all(1, pulling(ReasonErrImagePull)))
	waitUntil("pull", "ImagePullBackOff", all(1, pulling(ReasonImagePullBackOff)))
	if in := ctrld.instances("api"); !all(2, healthy("rev1"))(in) {
		t.Fatalf("the good image's instances changed meanwhile: %s", show(in))
	}

	// The update rolls api-1 first and waits for it to be ready, which it
	// never is: the two instances run different revisions.
	apply("api", "ghcr.io/acme/api:"+kubetest.CrashLoopTag, "rev2", 2)
	waitUntil("api", "api-1 on rev2 crash-looping beside api-0 on rev1", func(in []*ctrlv1.Instance) bool {
		return len(in) == 2 && healthy("rev1")(in[0]) && crashing("rev2", 1)(in[1])
	})
}
