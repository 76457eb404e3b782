package rolloutcheck_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/agentd/agent"
	"github.com/deploysync/deploysync/agentd/liveview"
	agentmetrics "github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A crash-looping canary, on real parts: eu's API server with kwok (which
// serves the Pods' logs through pods/log as a kubelet does), a real agent
// connected to one ctrld replica, and the on-call engineer's calls on the
// other. The halt quotes what the crashed container said; its pods,
// events and previous run's log come through the agent; a read-only key
// sees the pods, not the logs.
func TestOnCallSeesWhyTheCanaryFailedThroughTheAgent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := servertest.Start(t, server.Config{RolloutInterval: 200 * time.Millisecond,
		Peers: peers.Config{AdvertiseAddr: "127.0.0.1", Heartbeat: 50 * time.Millisecond, PeerTTL: time.Minute}})
	other := env.StartReplica()
	c := clusters["eu"].Get(t)
	clients, err := agent.ClientsFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{"us", "ap"} {
		env.AgentToken(region)
	}
	cluster := ctrlv1.NewClusterServiceClient(servertest.Dial(t, env.Server.Addr, env.AgentToken("eu")))
	cfg := agent.Config{Region: "eu", Identity: "agent-eu", StatusInterval: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, LiveViews: liveview.Logs}
	done := make(chan struct{})
	go func() {
		defer close(done)
		agent.Run(ctx, cfg, clients, cluster, servertest.Logger(), agentmetrics.New(prometheus.NewRegistry()))
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The on-call engineer's calls land on the other replica.
	op := ctrlv1.NewOperatorServiceClient(servertest.Dial(t, other.Addr, env.OperatorToken("dana")))
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "checkout", WorkspaceId: "acme", EnvironmentId: "live",
		Image: "ghcr.io/acme/checkout:v1", CpuMillicores: 50, MemoryMib: 64, Regions: []string{"eu", "us", "ap"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	bad := "ghcr.io/acme/checkout:crashloop"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "checkout", Image: &bad, Rollout: &ctrlv1.RolloutStrategy{
		OnFailure: "pause", Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Deadline: durationpb.New(time.Minute)}, {Regions: []string{"*"}}}}}); err != nil {
		t.Fatal(err)
	}
	var r *ctrlv1.Rollout
	eventually.True(t, 2*time.Minute, "the canary halted", func() bool {
		got, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "checkout"})
		r = got.GetRollout()
		return err == nil && r.State == "halted"
	})
	if !strings.Contains(r.Reason, `eu: `) || !strings.Contains(r.Reason, `CrashLoopBackOff`) || !strings.Contains(r.Reason, `"panic: DATABASE_URL is not set"`) {
		t.Fatalf("the halt: %s; want eu's CrashLoopBackOff with what the container said", r.Reason)
	}
	t.Logf("the halt: %s", r.Reason)

	pods, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "checkout", Region: "eu"})
	if err != nil || len(pods.Pods) != 1 || pods.Pods[0].Why != "CrashLoopBackOff" {
		t.Fatalf("eu's pods through the agent: %v, %v; want one crash-looping", pods, err)
	}
	pod := pods.Pods[0].Name
	events, err := op.ListEvents(ctx, &ctrlv1.ListEventsRequest{DeploymentId: "checkout", Region: "eu"})
	if err != nil || len(events.Events) == 0 {
		t.Fatalf("eu's events through the agent: %v, %v", events, err)
	}
	logs := readLogs(t, op, &ctrlv1.StreamLogsRequest{DeploymentId: "checkout", Region: "eu", Pod: pod, Previous: true})
	if !strings.Contains(logs, kubetest.CrashLogLine) {
		t.Fatalf("the crashed run's log through the agent:\n%s\nwant %q", logs, kubetest.CrashLogLine)
	}

	// A read-only key on the same replica: pods yes, logs no.
	credential, revoke := other.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := other.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bob := ctrlv1.NewOperatorServiceClient(conn)
	if _, err := bob.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "checkout", Region: "eu"}); err != nil {
		t.Fatalf("a read-only key's pods: %v", err)
	}
	s, err := bob.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "checkout", Region: "eu", Pod: pod, Previous: true})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a read-only key's logs: %v, want PermissionDenied", err)
	}
}

// readLogs is the whole of a logs answer.
func readLogs(t *testing.T, op ctrlv1.OperatorServiceClient, req *ctrlv1.StreamLogsRequest) string {
	t.Helper()
	s, err := op.StreamLogs(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return b.String()
		}
		if err != nil {
			t.Fatalf("logs: %v", err)
		}
		b.WriteString(m.Log)
	}
}
