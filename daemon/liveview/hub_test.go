package liveview_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// agent stands in for a region's agentd on ctrld's side of the two
// calls: it answers each request with answer. (agentd's own serving, on
// a real API server, is agentd/liveview's to test.)
func agent(t testing.TB, ctx context.Context, c ctrlv1.ClusterServiceClient, region string, answer func(*ctrlv1.LiveRequest, func(*ctrlv1.LiveAnswerRequest) error)) {
	t.Helper()
	s, err := c.LiveRequests(ctx, &ctrlv1.LiveRequestsRequest{Region: region, AgentIdentity: "agent-" + region, Serves: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				return
			}
			go func() {
				call, err := c.LiveAnswer(ctx)
				if err != nil {
					return
				}
				first := true
				answer(req, func(chunk *ctrlv1.LiveAnswerRequest) error {
					if first {
						chunk.Id, first = req.Id, false
					}
					return call.Send(chunk)
				})
				call.CloseAndRecv()
			}()
		}
	}()
}

func liveEnv(t *testing.T) (*servertest.Env, ctrlv1.OperatorServiceClient) {
	t.Helper()
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	op := env.Operator("dana")
	if _, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	return env, op
}

// A person's view goes to the region's agent over the agent's own
// connection and the answer comes back; what the agent asked is the
// deployment's namespace, and people see keyed spec hashes only.
func TestAViewGoesThroughTheAgentsConnection(t *testing.T) {
	env, op := liveEnv(t)
	ctx := t.Context()
	var asked atomic.Pointer[ctrlv1.LiveRequest]
	agent(t, ctx, env.Agent("eu"), "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		asked.Store(req)
		switch req.Kind {
		case "pods":
			send(&ctrlv1.LiveAnswerRequest{Pods: []*ctrlv1.LivePod{{Name: "api-0", Phase: "Running", SpecHash: "realhash"}}, Done: true})
		case "logs":
			send(&ctrlv1.LiveAnswerRequest{Log: "panic: DATABASE_URL is not set\n"})
			send(&ctrlv1.LiveAnswerRequest{Done: true})
		}
	})
	var pods *ctrlv1.ListPodsResponse
	eventually.True(t, 5*time.Second, "the agent's pods", func() bool {
		var err error
		pods, err = op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
		return err == nil
	})
	if len(pods.Pods) != 1 || pods.Pods[0].Name != "api-0" || pods.Pods[0].SpecHash == "realhash" || pods.Pods[0].SpecHash == "" {
		t.Fatalf("pods %v: want api-0 with its hash keyed", pods.Pods)
	}
	if r := asked.Load(); r.Namespace != "acme-prod" || r.DeploymentId != "api" || len(r.Id) != 32 {
		t.Fatalf("the agent was asked %v", r)
	}
	logs, err := op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0", Previous: true})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for {
		m, err := logs.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatalf("logs: %v", err)
			}
			break
		}
		text.WriteString(m.Log)
	}
	if text.String() != "panic: DATABASE_URL is not set\n" {
		t.Fatalf("logs %q", text.String())
	}
	if r := asked.Load(); !r.Previous || r.Pod != "api-0" || r.TailLines != 100 || r.LimitBytes != 1<<20 {
		t.Fatalf("the agent was asked for logs %v", r)
	}
	rec := env.DB.Ent.AuditLog.Query().Where(auditlog.Action("logs.read")).OnlyX(ctx)
	if rec.Actor != "dana" || rec.Target != "api/eu/api-0" || rec.Error != "" {
		t.Fatalf("the audit of the read: %+v", rec)
	}
}

// An agent that is not connected is a clear error at once; one that
// never answers, within FirstByte; a request for a deployment that does
// not run in the region asks no agent.
func TestAnAgentThatIsGoneOrSilentIsAClearError(t *testing.T) {
	env, op := liveEnv(t)
	ctx := t.Context()
	start := time.Now()
	_, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not connected") || time.Since(start) > 2*time.Second {
		t.Fatalf("no agent: %v after %s, want Unavailable at once", err, time.Since(start))
	}
	if _, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "us"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a region the deployment does not run in: %v, want NotFound", err)
	}
	agent(t, ctx, env.Agent("eu"), "eu", func(*ctrlv1.LiveRequest, func(*ctrlv1.LiveAnswerRequest) error) {
		<-ctx.Done() // never answers
	})
	eventually.True(t, 5*time.Second, "a silent agent times out", func() bool {
		start = time.Now()
		_, err = op.ListEvents(ctx, &ctrlv1.ListEventsRequest{DeploymentId: "api", Region: "eu"})
		return status.Code(err) != codes.Unavailable
	})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "did not answer within 10s") {
		t.Fatalf("a silent agent: %v, want DeadlineExceeded", err)
	}
}

// A follow nobody reads does not make ctrld (or the agent) buffer: the
// agent's sends block once the transport's windows are full.
func TestAFollowNobodyReadsHoldsTheAgent(t *testing.T) {
	env, op := liveEnv(t)
	ctx := t.Context()
	var sent atomic.Int64
	agent(t, ctx, env.Agent("eu"), "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		line := strings.Repeat("x", 64<<10-1) + "\n"
		for range 2000 { // 125 MiB
			if send(&ctrlv1.LiveAnswerRequest{Log: line}) != nil {
				return
			}
			sent.Add(1)
		}
	})
	var logs ctrlv1.OperatorService_StreamLogsClient
	eventually.True(t, 5*time.Second, "a follow", func() bool {
		var err error
		logs, err = op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0", Follow: true})
		if err != nil {
			return false
		}
		_, err = logs.Recv() // the first chunk: the answer started
		return err == nil
	})
	// Nobody reads any more.
	eventually.True(t, 10*time.Second, "the agent's sends stop", func() bool {
		before := sent.Load()
		time.Sleep(500 * time.Millisecond)
		return sent.Load() == before
	})
	if n := sent.Load(); n > 400 {
		t.Fatalf("the agent sent %d chunks of 64 KiB (%d MiB) to a reader that reads nothing", n, n/16)
	} else {
		t.Logf("the agent stopped after %d chunks (%d KiB) for a reader that reads nothing", n, n*64)
	}
}

// A read-only key sees pods and events but not logs; logs are a grant
// of their own.
func TestAReadOnlyKeyReadsNoLogs(t *testing.T) {
	env, _ := liveEnv(t)
	ctx := t.Context()
	agent(t, ctx, env.Agent("eu"), "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		send(&ctrlv1.LiveAnswerRequest{Log: "secret\n", Done: true})
	})
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bob := ctrlv1.NewOperatorServiceClient(conn)
	eventually.True(t, 5*time.Second, "bob sees the events", func() bool {
		_, err := bob.ListEvents(ctx, &ctrlv1.ListEventsRequest{DeploymentId: "api", Region: "eu"})
		return err == nil
	})
	s, err := bob.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0"})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not logs") {
		t.Fatalf("a read-only key's logs: %v, want PermissionDenied", err)
	}
	// Logs are a grant of their own, whatever the role: an operator key
	// without it is refused them, a read-only key with it reads them.
	for _, c := range []struct {
		who  auth.SessionIdentity
		code codes.Code
	}{
		{auth.SessionIdentity{Name: "olga", Fingerprint: "SHA256:olga", RemoteAddr: "203.0.113.8:1", ReadOnly: false}, codes.PermissionDenied},
		{auth.SessionIdentity{Name: "rita", Fingerprint: "SHA256:rita", RemoteAddr: "203.0.113.9:1", ReadOnly: true, Logs: true}, codes.OK},
	} {
		credential, revoke := env.Server.Sessions.Mint(c.who)
		defer revoke()
		conn, err := env.Server.DialInProcess(credential)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		s, err := ctrlv1.NewOperatorServiceClient(conn).StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0"})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != c.code {
			t.Errorf("%s (read-only %v, logs %v): %v, want %s", c.who.Name, c.who.ReadOnly, c.who.Logs, err, c.code)
		}
	}
	n := env.DB.Ent.AuditLog.Query().Where(auditlog.Action("logs.read")).CountX(ctx)
	if n != 1 {
		t.Errorf("%d logs reads audited, want rita's", n)
	}
}

// The person's call is on one replica, the region's agent connected to
// another: the view goes through the peer that has the agent.
func TestAViewReachesAnAgentOnAnotherReplica(t *testing.T) {
	env := servertest.Start(t, server.Config{Peers: peers.Config{AdvertiseAddr: "127.0.0.1", Heartbeat: 50 * time.Millisecond, PeerTTL: time.Minute}})
	ctx := t.Context()
	other := env.StartReplica()
	token := env.AgentToken("eu")
	op := env.Operator("dana")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	// The agent talks to the other replica only.
	agent(t, ctx, ctrlv1.NewClusterServiceClient(servertest.Dial(t, other.Addr, token)), "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		send(&ctrlv1.LiveAnswerRequest{Log: "from the other replica\n", Done: true})
	})
	eventually.True(t, 10*time.Second, "the peers know each other", func() bool { return env.Server.Peers.Peers() == 1 })
	var text string
	eventually.True(t, 10*time.Second, "the logs through the peer", func() bool {
		s, err := op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0"})
		if err != nil {
			return false
		}
		m, err := s.Recv()
		if err != nil {
			t.Logf("logs: %v", err)
			return false
		}
		text = m.Log
		return true
	})
	if text != "from the other replica\n" {
		t.Fatalf("logs %q", text)
	}
}

// A follow ends within seconds of its caller's token being revoked, and
// the agent's answer with it.
func TestAFollowEndsWhenItsTokenIsRevoked(t *testing.T) {
	env := servertest.Start(t, server.Config{TokenRecheck: 200 * time.Millisecond})
	ctx := t.Context()
	env.AgentToken("eu")
	op := env.Operator("dana")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	agent(t, ctx, env.Agent("eu"), "eu", func(req *ctrlv1.LiveRequest, send func(*ctrlv1.LiveAnswerRequest) error) {
		for {
			if err := send(&ctrlv1.LiveAnswerRequest{Log: "tick\n"}); err != nil {
				agentDone <- err
				return
			}
			time.Sleep(50 * time.Millisecond) // a log that grows slowly
		}
	})
	erin := ctrlv1.NewOperatorServiceClient(env.Dial(env.OperatorToken("erin")))
	var s ctrlv1.OperatorService_StreamLogsClient
	eventually.True(t, 5*time.Second, "erin's follow", func() bool {
		var err error
		if s, err = erin.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0", Follow: true}); err != nil {
			return false
		}
		_, err = s.Recv()
		return err == nil
	})
	if _, err := auth.Revoke(ctx, env.DB.Ent, auth.Operator, "erin"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		if _, err := s.Recv(); err != nil {
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("erin's follow ended with %v, want Unauthenticated", err)
			}
			break
		}
	}
	if took := time.Since(revoked); took > 3*time.Second {
		t.Fatalf("the follow ended %s after the revocation", took)
	} else {
		t.Logf("the follow ended %s after the revocation", took.Round(time.Millisecond))
	}
	select {
	case <-agentDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent still sends for a follow that ended")
	}
}

// A flood of views at an agent that does not keep up: beyond what may
// wait for it, each is refused at once, and nothing but the audit of
// the logs reads is written.
func TestAFloodOfViewsIsRefusedAtOnce(t *testing.T) {
	env, op := liveEnv(t)
	ctx := t.Context()
	// An agent that holds its stream open and takes no request off it.
	if _, err := env.Agent("eu").LiveRequests(ctx, &ctrlv1.LiveRequestsRequest{Region: "eu", AgentIdentity: "agent-eu", Serves: "logs"}); err != nil {
		t.Fatal(err)
	}
	changes := env.DB.Ent.DeploymentChange.Query().CountX(ctx)
	eventually.True(t, 5*time.Second, "the agent's stream is up", func() bool {
		_, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
		return status.Code(err) != codes.Unavailable
	})
	const flood = 100
	errs := make(chan error, flood)
	start := time.Now()
	for range flood {
		go func() {
			s, err := op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0"})
			if err == nil {
				_, err = s.Recv()
			}
			errs <- err
		}()
	}
	refused := 0
	for range flood {
		err := <-errs
		if status.Code(err) == codes.ResourceExhausted {
			refused++
			continue
		}
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a view in the flood: %v", err)
		}
	}
	if refused < flood-16 {
		t.Fatalf("%d of %d refused, want all but the 16 that may wait", refused, flood)
	}
	t.Logf("%d of %d refused; the rest timed out after %s", refused, flood, time.Since(start).Round(time.Millisecond))
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != changes {
		t.Fatalf("the flood wrote %d change rows", n-changes)
	}
}
