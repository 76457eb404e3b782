package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// logsAgent stands in for region eu's agent on ctrld's side of its calls:
// it answers pods and logs, and counts the logs it was asked for.
type logsAgent struct {
	mu   sync.Mutex
	logs int
}

func (a *logsAgent) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logs
}

func (a *logsAgent) start(t *testing.T, c ctrlv1.ClusterServiceClient) {
	t.Helper()
	ctx := t.Context()
	s, err := c.LiveRequests(ctx, &ctrlv1.LiveRequestsRequest{Region: "eu", AgentIdentity: "agent-eu", Serves: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				return
			}
			if req.Kind == "logs" {
				a.mu.Lock()
				a.logs++
				a.mu.Unlock()
			}
			go func() {
				call, err := c.LiveAnswer(ctx)
				if err != nil {
					return
				}
				defer call.CloseAndRecv()
				answer := &ctrlv1.LiveAnswerRequest{Id: req.Id, Pods: []*ctrlv1.LivePod{{Name: "api-0", Phase: "Running"}}, Done: true}
				if req.Kind == "logs" {
					answer = &ctrlv1.LiveAnswerRequest{Id: req.Id, Log: "DATABASE_URL=postgres://app:hunter2@db\n", Done: !req.Follow}
				}
				if call.Send(answer) != nil || !answer.Done && req.Follow {
					// A follow: a line every 20 ms until nobody reads.
					for call.Send(&ctrlv1.LiveAnswerRequest{Log: "tick\n"}) == nil {
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
		}
	}()
}

// readLogs is the whole of a logs answer of api-0, or its error.
func readLogs(ctx context.Context, op ctrlv1.OperatorServiceClient) (string, error) {
	s, err := op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0"})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		b.WriteString(m.Log)
	}
}

// Reading logs is a grant of an operator token's own, as it is of a
// console key's: on a real ctrld on MariaDB, a token created without it
// (`ctrld token create --operator carol`) still lists pods and acts, but
// its StreamLogs is PermissionDenied, naming the token and how to get the
// grant, before the agent is asked; the refusal is on record like other
// refused calls (under the token's name, with its ID). A token created
// with it (`--logs`) reads the log, and only its read is a logs.read.
// `ctrld token list` (auth.List) tells them apart.
func TestAnOperatorTokenReadsLogsOnlyWithTheLogsGrant(t *testing.T) {
	env := servertest.Start(t, server.Config{RefusalAuditWindow: 50 * time.Millisecond})
	ctx := t.Context()
	env.AgentToken("eu")
	if _, err := env.Operator("setup").Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	agent := &logsAgent{}
	agent.start(t, env.Agent("eu"))

	carolToken := env.OperatorTokenWith("carol", auth.Grants{})
	carol := ctrlv1.NewOperatorServiceClient(env.Dial(carolToken))
	dora := ctrlv1.NewOperatorServiceClient(env.Dial(env.OperatorTokenWith("dora", auth.Grants{Logs: true})))
	eventually.True(t, 5*time.Second, "carol sees the pods through the agent", func() bool {
		_, err := carol.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
		return err == nil
	})

	text, err := readLogs(ctx, carol)
	if status.Code(err) != codes.PermissionDenied || text != "" {
		t.Fatalf("carol's logs, a token without the grant: %q, %v; want PermissionDenied", text, err)
	}
	carolID := auth.TokenID(carolToken)
	for _, says := range []string{`"carol"`, carolID, "ctrld token create --operator NAME --logs"} {
		if !strings.Contains(status.Convert(err).Message(), says) {
			t.Errorf("carol's refusal %q does not say %s", status.Convert(err).Message(), says)
		}
	}
	if n := agent.asked(); n != 0 {
		t.Errorf("the agent was asked for logs %d times for a token without the grant", n)
	}
	if _, err := carol.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu"}); err != nil {
		t.Errorf("carol, an operator without the logs grant, may still act: %v", err)
	}

	text, err = readLogs(ctx, dora)
	if err != nil || text != "DATABASE_URL=postgres://app:hunter2@db\n" {
		t.Fatalf("dora's logs, a token with the grant: %q, %v", text, err)
	}

	eventually.True(t, 5*time.Second, "carol's refused read of logs is on record", func() bool {
		return env.DB.Ent.AuditLog.Query().Where(auditlog.Actor("carol"), auditlog.Action("StreamLogs")).ExistX(ctx)
	})
	refused := env.DB.Ent.AuditLog.Query().Where(auditlog.Actor("carol"), auditlog.Action("StreamLogs")).OnlyX(ctx)
	if !strings.Contains(refused.Error, "may not read logs") || !strings.Contains(refused.Error, carolID) || refused.Count != 1 {
		t.Errorf("the audit of carol's refusal: %+v; want why, her token's ID and a count of 1", refused)
	}
	reads := env.DB.Ent.AuditLog.Query().Where(auditlog.Action("logs.read")).AllX(ctx)
	if len(reads) != 1 || reads[0].Actor != "dora" || reads[0].Error != "" {
		t.Errorf("the logs reads on record: %+v; want dora's only", reads)
	}

	tokens, err := auth.List(ctx, env.DB.Ent, false)
	if err != nil {
		t.Fatal(err)
	}
	grants := map[string]bool{}
	for _, tok := range tokens {
		grants[tok.Name] = tok.Logs
	}
	if grants["carol"] || !grants["dora"] {
		t.Errorf("the tokens' logs grants as listed: %v; want dora's only", grants)
	}
}

// Tokens from before api_tokens.logs existed get no logs grant from the
// migration: on a database whose table has no such column, a live
// operator token's holder may still call the service after `ctrld
// migrate`, but not read logs.
func TestMigrationGivesOlderTokensNoLogsGrant(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := t.Context()
	secret := make([]byte, 32)
	rand.Read(secret)
	token := "dso_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(secret))
	sum := sha256.Sum256([]byte(token))
	h := hex.EncodeToString(sum[:])
	// The table as an older ctrld made it, and its token as it wrote it.
	env.DB.Ent.ExecContext(ctx, "ALTER TABLE api_tokens DROP COLUMN logs")
	if _, err := env.DB.Ent.ExecContext(ctx, "INSERT INTO api_tokens (kind, name, region, hash, created_at) VALUES ('operator', 'olga', '', ?, NOW(6))", h); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, env.DB.Ent); err != nil {
		t.Fatal(err)
	}
	env.AgentToken("eu")
	olga := ctrlv1.NewOperatorServiceClient(env.Dial(token))
	if _, err := olga.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatalf("an older operator token after the migration: %v", err)
	}
	(&logsAgent{}).start(t, env.Agent("eu"))
	eventually.True(t, 5*time.Second, "olga sees the pods through the agent", func() bool {
		_, err := olga.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
		return err == nil
	})
	if text, err := readLogs(ctx, olga); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an older token's logs after the migration: %q, %v; want PermissionDenied", text, err)
	}
}

// A console session's follow of a log is no token's stream: the token
// recheck, which ends the streams of revoked tokens, leaves it running
// past several of its intervals (it ended one within the interval, as
// "token revoked while streaming", its credential being in no table),
// and ends it once the session's credential is revoked.
func TestAConsoleSessionsFollowOutlivesTheTokenRecheck(t *testing.T) {
	env := servertest.Start(t, server.Config{TokenRecheck: 50 * time.Millisecond})
	ctx := t.Context()
	env.AgentToken("eu")
	if _, err := env.Operator("setup").Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	(&logsAgent{}).start(t, env.Agent("eu"))
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "rita", Fingerprint: "SHA256:rita", RemoteAddr: "203.0.113.9:1", Logs: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rita := ctrlv1.NewOperatorServiceClient(conn)
	eventually.True(t, 5*time.Second, "rita sees the pods through the agent", func() bool {
		_, err := rita.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: "api", Region: "eu"})
		return err == nil
	})
	s, err := rita.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: "api", Region: "eu", Pod: "api-0", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(500 * time.Millisecond); time.Now().Before(until); {
		if _, err := s.Recv(); err != nil {
			t.Fatalf("rita's follow ended after 10 token rechecks: %v", err)
		}
	}
	revoke()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("the follow of a revoked session ended with %v, want Unauthenticated", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follow of a revoked session still runs after 5 s")
	}
}
