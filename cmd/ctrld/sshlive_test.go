package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/liveview"
	agentmetrics "github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// On-call over SSH, on real parts end to end: Debian's OpenSSH client in
// a 160×40 tmux, logged in with a key granted logs, on a real ctrld on
// MariaDB; the region's real agent (in process, serving live views) on a
// real kube-apiserver with kwok, which crash-loops the deployment's Pod
// and serves its logs through pods/log as a kubelet does. The person
// opens the deployment's pods (CrashLoopBackOff, with the restarts), its
// events (the scheduler's), the pod's log and, with p, the run that
// crashed: its panic line reaches the terminal.
func TestSSHConsoleShowsACrashLoopsPodsEventsAndLogThroughTheAgent(t *testing.T) {
	needTools(t, "ssh", "tmux")
	cluster := kubetest.StartForTest(t, kubetest.Options{Workloads: true, PodLogs: true})
	e := startSSH(t, sshserve.Config{Refresh: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	clients, err := agent.ClientsFor(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Region: "eu-west", Identity: "agent-eu-west", StatusInterval: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, LiveViews: liveview.Logs}
	// The token registers the region: made before the deploy names it.
	agentConn := ctrlv1.NewClusterServiceClient(e.Dial(e.AgentToken("eu-west")))
	done := make(chan struct{})
	go func() {
		defer close(done)
		agent.Run(ctx, cfg, clients, agentConn, servertest.Logger(), agentmetrics.New(prometheus.NewRegistry()))
	}()
	t.Cleanup(func() { cancel(); <-done })

	op := e.Operator("setup")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "shop", WorkspaceId: "acme", EnvironmentId: "live",
		Image: "ghcr.io/acme/shop:" + kubetest.CrashLoopTag, CpuMillicores: 50, MemoryMib: 64, Regions: []string{"eu-west"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	// Until the Pod crashed once, it has no previous run to show.
	eventually.True(t, 30*time.Second, "shop-0 crash-loops, as the agent sees it", func() bool {
		pods, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "shop", Region: "eu-west"})
		return err == nil && len(pods.Pods) == 1 && pods.Pods[0].Why == "CrashLoopBackOff" && pods.Pods[0].Restarts > 0
	})

	// alice's key, an operator's granted logs, in OpenSSH's client.
	m := aliceInTmux(t, e, 160, 40)

	m.waitFor("eu-west")
	m.keys("Tab")
	m.waitFor("shop")
	m.keys("Enter")
	m.waitFor("pods of shop in eu-west")
	pods := m.waitFor("container app: not ready, waiting CrashLoopBackOff")
	for _, want := range []string{"shop-0", "Running", "CrashLoopBackOff", "kwok-node-0"} {
		if !strings.Contains(pods, want) {
			t.Errorf("the pods page does not show %q:\n%s", want, pods)
		}
	}
	m.keys("e")
	m.waitFor("events of shop in eu-west")
	m.waitFor("Pod shop-0")
	m.waitFor("Scheduled")
	m.keys("Escape")
	m.waitFor("pods of shop in eu-west")
	m.keys("l")
	m.waitFor("log of shop-0 (shop in eu-west)")
	m.keys("p")
	log := m.waitFor(kubetest.CrashLogLine)
	if !strings.Contains(log, "the run before (the one that crashed)") {
		t.Errorf("the crash's line is not on the crashed run's page:\n%s", log)
	}
	m.keys("q")
	m.waitFor("ssh exited 0")
}
