package server_test

import (
	"context"
	"strings"
	"testing"

	"entgo.io/ent/dialect/sql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/ent/region"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// consoleSession is what ctrld's SSH console does for a session: mint a
// credential for the person and call the operator service in-process.
func consoleSession(t *testing.T, srv *server.Server, id auth.SessionIdentity) (ctrlv1.OperatorServiceClient, string, func()) {
	t.Helper()
	credential, revoke := srv.Sessions.Mint(id)
	conn, err := srv.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ctrlv1.NewOperatorServiceClient(conn), credential, revoke
}

func TestReadOnlyConsoleSessionIsRefusedWritesAndAudited(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu") // registers the region
	ctx := context.Background()
	bob := auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true}
	op, _, _ := consoleSession(t, env.Server, bob)

	if _, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); err != nil {
		t.Fatalf("a read-only session must read: %v", err)
	}
	_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a read-only session's write: got %v, want PermissionDenied naming read-only", err)
	}
	if env.DB.Ent.Region.Query().Where(region.ID("eu"), region.Paused(true)).ExistX(ctx) {
		t.Fatal("the refused pause was written")
	}
	env.Server.Stop() // writes the refusals it gathered
	logs := env.DB.Ent.AuditLog.Query().Order(auditlog.ByID()).AllX(ctx)
	if len(logs) != 1 {
		t.Fatalf("want one audit record of the refusal, got %d", len(logs))
	}
	want := "bob (ssh key SHA256:bobkey from 203.0.113.7:50022)"
	if l := logs[0]; l.Actor != want || l.Action != "SetRegionPaused" || !strings.Contains(l.Error, "read-only") {
		t.Errorf("audit record: actor %q action %q error %q; want actor %q, SetRegionPaused, read-only", l.Actor, l.Action, l.Error, want)
	}
}

func TestOperatorConsoleSessionWritesUnderThePersonsKey(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ctx := context.Background()
	alice := auth.SessionIdentity{Name: "alice", Fingerprint: "SHA256:alicekey", RemoteAddr: "198.51.100.1:40000"}
	op, credential, revoke := consoleSession(t, env.Server, alice)

	if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatalf("an operator session's write: %v", err)
	}
	l := env.DB.Ent.AuditLog.Query().OnlyX(ctx)
	if want := "alice (ssh key SHA256:alicekey from 198.51.100.1:40000)"; l.Actor != want || l.Error != "" {
		t.Errorf("audit record: actor %q error %q, want %q and no error", l.Actor, l.Error, want)
	}

	// The credential is taken in-process only: over the network it is
	// nobody's.
	remote := ctrlv1.NewOperatorServiceClient(env.Dial(credential))
	if _, err := remote.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a session credential over the network: got %v, want Unauthenticated", err)
	}
	// Nor can it call the agents' service.
	agent := ctrlv1.NewClusterServiceClient(mustDialInProcess(t, env.Server, credential))
	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a session credential on the cluster service: got %v, want PermissionDenied", err)
	}

	revoke()
	if _, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("after the session ended: got %v, want Unauthenticated", err)
	}
	if n := env.Server.Sessions.Live(); n != 0 {
		t.Errorf("%d credentials live after the only session ended", n)
	}
}

func mustDialInProcess(t *testing.T, srv *server.Server, credential string) *grpc.ClientConn {
	t.Helper()
	conn, err := srv.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A read-only person's refused writes are gathered under their key and
// source address, not under the connection: each reconnect comes from
// another port, and gathering by it would take a new place in the shared
// refusal log per connection. Another address is a row of its own: a
// stolen key does not hide in its owner's record.
func TestRefusedSessionWritesAreGatheredByKey(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu")
	ctx := context.Background()
	for _, addr := range []string{"203.0.113.7:50022", "203.0.113.7:50023", "198.51.100.9:40000"} {
		bob := auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: addr, ReadOnly: true}
		op, _, _ := consoleSession(t, env.Server, bob)
		if _, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("from %s: got %v, want PermissionDenied", addr, err)
		}
	}
	env.Server.Stop() // writes the refusals it gathered
	logs := env.DB.Ent.AuditLog.Query().Order(auditlog.ByCount(sql.OrderDesc())).AllX(ctx)
	if len(logs) != 2 || logs[0].Count != 2 || !strings.Contains(logs[0].Actor, "from 203.0.113.7:") ||
		logs[1].Count != 1 || !strings.Contains(logs[1].Actor, "from 198.51.100.9:") || !strings.Contains(logs[0].Error, "SHA256:bobkey") {
		for _, l := range logs {
			t.Logf("audit: %q count %d error %q", l.Actor, l.Count, l.Error)
		}
		t.Fatalf("want a record of bob's 2 refused writes from 203.0.113.7 and one of his 1 from 198.51.100.9, got %d records", len(logs))
	}
}
