package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A deploy to 70,000 regions (valid, distinct names, well within a gRPC
// message) is refused before the database as InvalidArgument naming the
// field. It used to reach the database, fail there with "too many
// placeholders" and come back Unavailable with the driver's text, which the
// audit record carried too.
func TestDeployToTooManyRegionsIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	r := deployRequest()
	r.Regions = make([]string, 70_000)
	for i := range r.Regions {
		r.Regions[i] = fmt.Sprintf("r-%d", i)
	}
	_, err := op.Deploy(ctx, r)
	if msg := status.Convert(err).Message(); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(msg, "regions: ") ||
		!strings.Contains(msg, fmt.Sprint(desired.MaxDeployRegions)) {
		t.Fatalf("deploy to 70,000 regions: got %v, want InvalidArgument naming regions and the most allowed", clip(err))
	}
	if n := env.DB.Ent.Deployment.Query().CountX(ctx); n != 0 {
		t.Errorf("the refused deploy stored %d deployments", n)
	}
	logs := auditLog(t, env)
	if len(logs) != 1 || logs[0].Action != "deploy" || !strings.HasPrefix(logs[0].Error, "regions: ") || strings.Contains(logs[0].Error, "Error ") {
		t.Errorf("want one audit record of the refused deploy naming regions, without driver text; got %+v", logs)
	}
}

// A failure the service does not expect (here the database lost a table) is
// not the caller's to read: the client gets a generic Unavailable, without
// the driver's text, and ctrld's log has the cause. The action wrote
// nothing.
func TestUnexpectedFailuresKeepDriverTextFromClients(t *testing.T) {
	p := newInProcess(t)
	if _, err := p.db.SQL.ExecContext(p.ctx, "DROP TABLE namespaces"); err != nil {
		t.Fatal(err)
	}
	_, err := p.svc.Deploy(p.ctx, deployRequest())
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || msg != "the action failed; nothing was changed; retry (ctrld logged the cause)" {
		t.Errorf("deploy without its namespaces table: got %v, want Unavailable with the generic message", err)
	}
	if !strings.Contains(p.log.String(), "namespaces' doesn't exist") {
		t.Errorf("ctrld's log lacks the cause:\n%s", p.log.String())
	}
	if n := p.db.Ent.Deployment.Query().CountX(p.ctx); n != 0 {
		t.Errorf("the failed deploy left %d deployments", n)
	}
}

// A deploy that loses every rerun of its transaction to a deadlock is
// rolled back; the caller hears Aborted ("retry"), not Unavailable, and no
// driver text. (The database cannot be made to pick one transaction as the
// victim four times running, so the deadlock is injected where the
// deployment is written.)
func TestDeadlockedActionIsAborted(t *testing.T) {
	p := newInProcess(t)
	p.db.Ent.Deployment.Use(func(ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(context.Context, ent.Mutation) (ent.Value, error) {
			return nil, &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock found when trying to get lock; try restarting transaction"}
		})
	})
	_, err := p.svc.Deploy(p.ctx, deployRequest())
	if status.Code(err) != codes.Aborted || strings.Contains(status.Convert(err).Message(), "Deadlock found") {
		t.Errorf("deploy deadlocked on every run: got %v, want Aborted without driver text", err)
	}
}

// A view that fails for a reason not the caller's tells the client only
// that ctrld logged the cause, and ctrld did.
func TestFailedViewsLogTheirCause(t *testing.T) {
	p := newInProcess(t)
	if _, err := p.db.SQL.ExecContext(p.ctx, "DROP TABLE agents"); err != nil {
		t.Fatal(err)
	}
	_, err := p.svc.ListRegions(p.ctx, &ctrlv1.ListRegionsRequest{})
	if status.Code(err) != codes.Unavailable || strings.Contains(status.Convert(err).Message(), "Error ") {
		t.Errorf("ListRegions without its agents table: got %v, want Unavailable without driver text", err)
	}
	if !strings.Contains(p.log.String(), "agents' doesn't exist") {
		t.Errorf("ctrld's log lacks the cause:\n%s", p.log.String())
	}
}
