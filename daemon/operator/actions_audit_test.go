package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/operator"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/ent/auditlog"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// targetColumn is the audit log's target column: VARCHAR(255), Ent's
// default string size.
const targetColumn = 255

func deployRequest() *ctrlv1.DeployRequest {
	return &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod", Image: "app:1",
		CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}
}

// auditLog returns the audit records in the order they were written.
func auditLog(t *testing.T, env *servertest.Env) []*ent.AuditLog {
	t.Helper()
	return env.DB.Ent.AuditLog.Query().Order(auditlog.ByID()).AllX(context.Background())
}

// A call refused by any check, the service's own early ones, the desired
// store's and the ID checks alike, is on record with who tried what and why
// it was refused; a target far over the column's size is clipped, not a
// reason to lose the record.
func TestRejectedCallsAreAudited(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	huge := strings.Repeat("a", 1<<20)

	cases := []struct {
		name, action, target string
		call                 func() error
	}{
		{"65 command arguments", "deploy", "api", func() error {
			r := deployRequest()
			r.Command = make([]string, 65)
			_, err := op.Deploy(ctx, r)
			return err
		}},
		{"257 env variables", "deploy", "api", func() error {
			r := deployRequest()
			r.Env = map[string]string{}
			for i := range 257 {
				r.Env[fmt.Sprintf("V%d", i)] = "1"
			}
			_, err := op.Deploy(ctx, r)
			return err
		}},
		{"1 MiB deployment_id", "deploy", huge[:targetColumn], func() error {
			r := deployRequest()
			r.DeploymentId = huge
			_, err := op.Deploy(ctx, r)
			return err
		}},
		{"unspecified status", "set-desired-status", "api@eu", func() error {
			_, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu"})
			return err
		}},
		{"too many replicas", "scale", "api@eu", func() error {
			_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "eu", Replicas: 5000})
			return err
		}},
		{"1025-character reason", "force-resync", "eu", func() error {
			_, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: strings.Repeat("r", 1025)})
			return err
		}},
		{"1 MiB sentinel_id", "delete-sentinel", huge[:targetColumn], func() error {
			_, err := op.DeleteSentinel(ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: huge})
			return err
		}},
		{"1 MiB region", "pause", huge[:targetColumn], func() error {
			_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: huge, Paused: true})
			return err
		}},
	}
	for _, c := range cases {
		if err := c.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", c.name, clip(err))
		}
	}
	logs := auditLog(t, env)
	if len(logs) != len(cases) {
		t.Fatalf("%d refused calls left %d audit records, want one each", len(cases), len(logs))
	}
	for i, c := range cases {
		l := logs[i]
		if l.Actor != "dana" || l.Action != c.action || l.Target != c.target || l.Error == "" {
			t.Errorf("%s: audit record {actor %q, action %q, target %d bytes %.20q, error %.60q}, want {dana, %s, %d bytes %.20q, the refusal}",
				c.name, l.Actor, l.Action, len(l.Target), l.Target, l.Error, c.action, len(c.target), c.target)
		}
	}
}

// Env values and command arguments may be credentials: the audit detail
// keeps the variables' names and the sizes of both, never the values,
// whether the call succeeds or is refused.
func TestSecretsStayOutOfTheAuditLog(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	const envSecret, argSecret = "hunter2-env-secret", "hunter2-arg-secret"
	withSecrets := func(image string) *ctrlv1.DeployRequest {
		r := deployRequest()
		r.Image = image
		r.Env = map[string]string{"DB_PASSWORD": envSecret}
		r.Command = []string{"/server", "--token=" + argSecret}
		return r
	}
	if _, err := op.Deploy(ctx, withSecrets("app:1")); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Deploy(ctx, withSecrets("NOT AN IMAGE")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("deploy with a bad image: got %v, want InvalidArgument", err)
	}
	logs := auditLog(t, env)
	if len(logs) != 2 {
		t.Fatalf("want 2 audit records, got %d", len(logs))
	}
	for _, l := range logs {
		for _, secret := range []string{envSecret, argSecret} {
			if strings.Contains(l.Detail, secret) || strings.Contains(l.Error, secret) {
				t.Errorf("audit record of %s (error %q) carries secret %q: %s", l.Action, l.Error, secret, l.Detail)
			}
		}
		if !strings.Contains(l.Detail, "DB_PASSWORD") || !strings.Contains(l.Detail, "redacted, 18 bytes") {
			t.Errorf("audit detail should keep the variable's name and the value's size: %s", l.Detail)
		}
	}
}

// A delete names what to delete by ID: an empty, path-like or huge ID is
// InvalidArgument naming the field (not NotFound), and nothing is deleted.
func TestDeletesRefuseBadIDs(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	if _, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "ws", EnvironmentId: "prod",
		Region: "eu", Image: "sentinel:1", Replicas: 1, CpuMillicores: 10, MemoryMib: 16}); err != nil {
		t.Fatal(err)
	}
	spec, err := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "allow", WorkspaceId: "ws",
		EnvironmentId: "prod", Region: "eu", Name: "allow", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	changes := env.DB.Ent.DeploymentChange.Query().CountX(ctx)

	deletes := map[string]func(id string) error{
		"deployment_id": func(id string) error {
			_, err := op.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: id})
			return err
		},
		"sentinel_id": func(id string) error {
			_, err := op.DeleteSentinel(ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: id})
			return err
		},
		"policy_id": func(id string) error {
			_, err := op.DeleteCiliumNetworkPolicy(ctx, &ctrlv1.DeleteCiliumNetworkPolicyRequest{PolicyId: id})
			return err
		},
	}
	for field, del := range deletes {
		for _, id := range []string{"", "../", "../gw", "GW", strings.Repeat("g", 1<<20)} {
			err := del(id)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
				t.Errorf("delete with %s %.20q: got %v, want InvalidArgument naming %s", field, id, clip(err), field)
			}
		}
	}
	if n := env.DB.Ent.Sentinel.Query().CountX(ctx) + env.DB.Ent.CiliumNetworkPolicy.Query().CountX(ctx); n != 2 {
		t.Errorf("refused deletes left %d of the sentinel and the policy", n)
	}
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != changes {
		t.Errorf("refused deletes wrote %d change rows", n-changes)
	}
}

// inProcess is the operator service called directly, without a gRPC
// server, on a fresh database with region eu, as operator erin; what it
// logs goes to log, as JSON.
type inProcess struct {
	svc *operator.Service
	db  *store.DB
	ctx context.Context
	log bytes.Buffer
}

func newInProcess(t *testing.T) *inProcess {
	t.Helper()
	p := &inProcess{db: storetest.New(t),
		ctx: auth.WithPrincipal(context.Background(), auth.Principal{Kind: apitoken.KindOperator, Name: "erin"})}
	if err := desired.RegisterRegion(p.ctx, p.db.Ent, "eu"); err != nil {
		t.Fatal(err)
	}
	p.svc = operator.New(p.db.Ent, p.db.SQL, quietTailer{}, slog.New(slog.NewJSONHandler(&p.log, nil)))
	return p
}

// When the database refuses the audit record itself, the record is not lost
// silently: ctrld logs all of it at error level, enough to write it by
// hand.
func TestAnAuditRecordTheDatabaseRefusesIsLoggedInFull(t *testing.T) {
	p := newInProcess(t)
	if _, err := p.db.SQL.ExecContext(p.ctx, "DROP TABLE operator_audit_log"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.svc.ForceResync(p.ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: "cache looks stale"}); err != nil {
		t.Fatalf("the resync itself should succeed: %v", err)
	}
	if _, err := p.svc.DeleteSentinel(p.ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: "ghost"}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleting a missing sentinel: got %v, want NotFound", err)
	}
	var lost []string
	for _, line := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			lost = append(lost, line)
		}
	}
	if len(lost) != 2 {
		t.Fatalf("want one error line per lost audit record, got %d:\n%s", len(lost), p.log.String())
	}
	for i, want := range [][]string{
		{`"actor":"erin"`, `"action":"force-resync"`, `"target":"eu"`, `cache looks stale`, `"error":""`},
		{`"actor":"erin"`, `"action":"delete-sentinel"`, `"target":"ghost"`, `"detail":"{`, `not found`},
	} {
		for _, w := range want {
			if !strings.Contains(lost[i], w) {
				t.Errorf("lost audit record %d: log line lacks %s:\n%s", i, w, lost[i])
			}
		}
	}
}

// An action that panics (a bug below the handler; the gRPC server recovers
// it) is still an attempted write: it is audited, without the panic's
// value, and the panic goes on to the server's recovery.
func TestAPanickingActionIsAudited(t *testing.T) {
	p := newInProcess(t)
	p.db.Ent.Sentinel.Use(func(ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(context.Context, ent.Mutation) (ent.Value, error) {
			panic("injected secret-laden panic")
		})
	})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller (the server's recovery)")
			}
		}()
		p.svc.DeleteSentinel(p.ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: "gw"})
	}()
	logs := p.db.Ent.AuditLog.Query().AllX(p.ctx)
	if len(logs) != 1 || logs[0].Action != "delete-sentinel" || logs[0].Target != "gw" || logs[0].Error == "" {
		t.Fatalf("want one audit record of the failed delete-sentinel on gw, got %+v", logs)
	}
	if strings.Contains(logs[0].Error, "secret") {
		t.Errorf("the audit record carries the panic's value: %q", logs[0].Error)
	}
}

// quietTailer stands in for the tailer, which this test does not run.
type quietTailer struct{}

func (quietTailer) Poke()                                {}
func (quietTailer) RefreshControl(context.Context) error { return nil }

// clip keeps a failure message readable when an error echoes a 1 MiB value.
func clip(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// A write refused before it reached the service is on record too when the
// caller is known: an agent's token calling Deploy leaves an audit record
// under the token's name and ID, with its secrets redacted, once the
// refusals gathered are written (at the latest when ctrld stops). A call
// without a valid token is refused and not written down (anyone reaching
// the port could fill the database with those).
func TestWritesRefusedByAuthenticationAreAudited(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agentToken := env.AgentToken("eu")
	agentAsOperator := ctrlv1.NewOperatorServiceClient(env.Dial(agentToken))
	r := deployRequest()
	r.Env = map[string]string{"API_KEY": "s3cr3t-value"}
	if _, err := agentAsOperator.Deploy(ctx, r); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("deploy with an agent token: got %v, want PermissionDenied", err)
	}
	if _, err := agentAsOperator.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a read with an agent token: got %v, want PermissionDenied", err)
	}
	anonymous := ctrlv1.NewOperatorServiceClient(env.Dial("not-a-token"))
	if _, err := anonymous.Deploy(ctx, deployRequest()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("deploy without a valid token: got %v, want Unauthenticated", err)
	}
	env.Server.Stop()
	logs := auditLog(t, env)
	if len(logs) != 1 {
		t.Fatalf("want one audit record (the agent token's deploy), got %+v", logs)
	}
	got := logs[0]
	if got.Actor != "agent-eu" || got.Action != "Deploy" || !strings.Contains(got.Error, "cannot call") || !strings.Contains(got.Error, auth.TokenID(agentToken)) ||
		got.Count != 1 || !strings.Contains(got.Detail, "API_KEY") || strings.Contains(got.Detail, "s3cr3t") {
		t.Errorf("audit record %+v: want the agent token's name, the method, the refusal naming the token's ID, and the env name without its value", got)
	}
}

// An audit write that the database does not answer (its table locked by
// someone else) is given up after the audit timeout and logged in full,
// with its count for gathered refusals: it holds neither the operator's
// call nor a connection for longer. Before, the write had no deadline and
// the call waited for as long as the table stayed locked.
func TestAuditWritesHaveADeadline(t *testing.T) {
	p := newInProcess(t)
	defer operator.SetAuditTimeout(200 * time.Millisecond)()
	locker, err := p.db.SQL.Conn(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(p.ctx, "LOCK TABLES operator_audit_log WRITE"); err != nil {
		t.Fatal(err)
	}
	defer locker.ExecContext(p.ctx, "UNLOCK TABLES")

	done := make(chan error, 1)
	go func() {
		_, err := p.svc.ForceResync(p.ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: "cache looks stale"})
		p.svc.AuditRefusal(p.ctx, auth.Refusal{Method: "/deploysync.ctrl.v1.OperatorService/Scale", TokenName: "agent-eu", TokenID: "tok_0123456789ab",
			Request: &ctrlv1.ScaleRequest{DeploymentId: "api"}, Err: status.Error(codes.PermissionDenied, "a agent token cannot call it")})
		p.svc.FlushRefusals(p.ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the resync itself should succeed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call and the refusals' flush were still waiting on the locked audit table after 30s; the audit timeout is 200ms")
	}
	log := p.log.String()
	for _, want := range []string{`"action":"force-resync"`, `"action":"Scale"`} {
		if !strings.Contains(log, "AUDIT RECORD LOST") || !strings.Contains(log, want) {
			t.Errorf("the record of %s given up is not logged in full:\n%s", want, log)
		}
	}
}
