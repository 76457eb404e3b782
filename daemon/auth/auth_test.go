package auth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent/apitoken"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The authorization scheme is case-insensitive (RFC 7235 section 2.1, which
// RFC 6750 builds on), and more than one space may separate it from the
// token; anything but the Bearer scheme is refused.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	token := env.OperatorToken("alice")
	conn, err := grpc.NewClient(env.Server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	op := ctrlv1.NewOperatorServiceClient(conn)
	call := func(authorization string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", authorization)
		_, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		return err
	}
	for _, ok := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token, "bEaReR   " + token} {
		if err := call(ok); err != nil {
			t.Errorf("authorization %.10q…: %v, want admitted", ok, err)
		}
	}
	for _, bad := range []string{token, "Bearer" + token, "Basic " + token, "Bearer ", "bearer"} {
		if err := call(bad); status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %.10q…: got %v, want Unauthenticated", bad, err)
		}
	}
}

// Operator actions are audited under the token's name, so two live operator
// tokens may not share one; a revoked token's name is free again. Agent
// tokens are not named for the audit log and may share a name (every token
// `ctrld token create --region eu` issues is "agent-eu").
func TestOperatorNamesAreUniqueAmongLiveTokens(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	create := func(kind apitoken.Kind, name, region string) error {
		_, err := auth.Create(ctx, db.Ent, kind, name, region)
		return err
	}
	if err := create(auth.Operator, "alice", ""); err != nil {
		t.Fatal(err)
	}
	err := create(auth.Operator, "alice", "")
	if !errors.Is(err, auth.ErrNameTaken) || !strings.Contains(err.Error(), `"alice"`) {
		t.Fatalf("second live operator token named alice: got %v, want ErrNameTaken naming alice", err)
	}
	for _, name := range []string{"alice", "agent-eu", "agent-eu"} {
		if err := create(auth.Agent, name, "eu"); err != nil {
			t.Errorf("agent token %s in eu: %v", name, err)
		}
	}
	if n, err := auth.Revoke(ctx, db.Ent, auth.Operator, "alice"); err != nil || n != 1 {
		t.Fatalf("revoke alice: %d, %v", n, err)
	}
	if err := create(auth.Operator, "alice", ""); err != nil {
		t.Errorf("operator token named alice after the old one was revoked: %v", err)
	}
	if n := db.Ent.APIToken.Query().Where(apitoken.KindEQ(auth.Operator), apitoken.Name("alice"), apitoken.RevokedAtIsNil()).CountX(ctx); n != 1 {
		t.Errorf("%d live operator tokens named alice, want 1", n)
	}
}

// Operators issuing tokens of one name at the same moment (ctrld token
// create run twice) get one token between them; the others are told the
// name is taken. On a table that holds tokens, the name check's locking read
// queues them; on an empty one, two creators' inserts deadlock and
// store.WithTx runs the loser again.
func TestConcurrentOperatorTokensOfOneNameAdmitOne(t *testing.T) {
	for _, c := range []struct {
		name      string
		creators  int
		preloaded bool
	}{{"tokens exist", 8, true}, {"first token", 2, false}} {
		t.Run(c.name, func(t *testing.T) {
			db := storetest.New(t)
			ctx := context.Background()
			if c.preloaded {
				if _, err := auth.Create(ctx, db.Ent, auth.Agent, "agent-eu", "eu"); err != nil {
					t.Fatal(err)
				}
			}
			errs := make([]error, c.creators)
			var wg sync.WaitGroup
			for i := range c.creators {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = auth.Create(ctx, db.Ent, auth.Operator, "bob", "")
				}()
			}
			wg.Wait()
			created := 0
			for _, err := range errs {
				switch {
				case err == nil:
					created++
				case !errors.Is(err, auth.ErrNameTaken):
					t.Errorf("concurrent create: %v, want success or ErrNameTaken", err)
				}
			}
			if n := db.Ent.APIToken.Query().Where(apitoken.Name("bob"), apitoken.RevokedAtIsNil()).CountX(ctx); created != 1 || n != 1 {
				t.Errorf("%d concurrent creates succeeded and %d live tokens are named bob, want 1 and 1", created, n)
			}
		})
	}
}
