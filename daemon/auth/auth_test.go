package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
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
	if _, err := auth.Revoke(ctx, db.Ent, auth.Operator, "alice"); err != nil {
		t.Fatalf("revoke alice: %v", err)
	}
	if err := create(auth.Operator, "alice", ""); err != nil {
		t.Errorf("operator token named alice after the old one was revoked: %v", err)
	}
	if n := db.Ent.APIToken.Query().Where(apitoken.KindEQ(auth.Operator), apitoken.Name("alice"), apitoken.RevokedAtIsNil()).CountX(ctx); n != 1 {
		t.Errorf("%d live operator tokens named alice, want 1", n)
	}
}

// Operators issuing tokens at the same moment (ctrld token create run by
// several people or scripts): of the creators of one name, exactly one gets
// a token and the others are told the name is taken; creators of different
// names all get theirs. None fails with a deadlock, on an empty table
// (where every new name falls into one gap of an index) or beside existing
// tokens. Before the name had a unique index, a locking read checked it:
// most creators of one name on an empty table, and several creators of
// different names, failed with "Deadlock found".
func TestConcurrentOperatorTokens(t *testing.T) {
	const creators, rounds = 16, 20
	for _, c := range []struct {
		name      string
		oneName   bool
		preloaded bool
	}{
		{"one name, first tokens", true, false},
		{"one name, tokens exist", true, true},
		{"a name each, first tokens", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for round := range rounds {
				db := storetest.New(t)
				ctx := context.Background()
				if c.preloaded {
					for _, name := range []string{"alice", "carol"} {
						if _, err := auth.Create(ctx, db.Ent, auth.Operator, name, ""); err != nil {
							t.Fatal(err)
						}
					}
				}
				names := make([]string, creators)
				for i := range names {
					names[i] = "bob"
					if !c.oneName {
						names[i] = fmt.Sprintf("bob-%d", i)
					}
				}
				errs := make([]error, creators)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, name := range names {
					wg.Go(func() {
						<-start
						_, errs[i] = auth.Create(ctx, db.Ent, auth.Operator, name, "")
					})
				}
				close(start)
				wg.Wait()
				created := 0
				for i, err := range errs {
					switch {
					case err == nil:
						created++
					case !c.oneName || !errors.Is(err, auth.ErrNameTaken):
						t.Fatalf("round %d: create %q: %v", round, names[i], err)
					}
				}
				live := db.Ent.APIToken.Query().Where(apitoken.NameHasPrefix("bob"), apitoken.RevokedAtIsNil()).CountX(ctx)
				want := creators
				if c.oneName {
					want = 1
				}
				if created != want || live != want {
					t.Fatalf("round %d: %d creates succeeded and %d live tokens are named bob…, want %d and %d", round, created, live, want, want)
				}
			}
		})
	}
}

// Databases written before live_operator_name and public_id existed hold
// live operator tokens without them; migrating gives them their names, so
// those names stay taken, and their IDs, derived from their hashes as new
// tokens' are. Where an older version let two live tokens share a name,
// the migration keeps both and the name stays taken until both are
// revoked: by ID, since the name is ambiguous.
func TestMigrationKeepsOlderOperatorNamesTaken(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	// Written as an older ctrld did: no live_operator_name, no public_id.
	var oldIDs []string
	for i, name := range []string{"alice", "alice", "bob"} {
		h := fmt.Sprintf("old-%d", i)
		create := db.Ent.APIToken.Create().SetKind(auth.Operator).SetName(name).SetHash(h)
		if name == "bob" {
			create.SetRevokedAt(time.Now())
		}
		create.ExecX(ctx)
		sum := sha256.Sum256([]byte(h))
		oldIDs = append(oldIDs, "tok_"+hex.EncodeToString(sum[:])[:12])
	}
	if err := store.Migrate(ctx, db.Ent); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Create(ctx, db.Ent, auth.Operator, "alice", ""); !errors.Is(err, auth.ErrNameTaken) {
		t.Errorf("new token named like two older live ones: got %v, want ErrNameTaken", err)
	}
	if _, err := auth.Create(ctx, db.Ent, auth.Operator, "bob", ""); err != nil {
		t.Errorf("new token named like an older revoked one: %v", err)
	}
	if _, err := auth.Revoke(ctx, db.Ent, auth.Operator, "alice"); !errors.Is(err, auth.ErrAmbiguous) {
		t.Fatalf("revoke alice, a name two older tokens share: got %v, want ErrAmbiguous", err)
	}
	if got, err := auth.Revoke(ctx, db.Ent, auth.Operator, oldIDs[0]); err != nil || got.Name != "alice" {
		t.Fatalf("revoke the first older alice by its ID %s: %v, %v", oldIDs[0], got, err)
	}
	if _, err := auth.Create(ctx, db.Ent, auth.Operator, "alice", ""); !errors.Is(err, auth.ErrNameTaken) {
		t.Errorf("new token named alice while an older one is live: got %v, want ErrNameTaken", err)
	}
	if got, err := auth.Revoke(ctx, db.Ent, auth.Operator, "alice"); err != nil || got.ID != oldIDs[1] {
		t.Fatalf("revoke alice, now one token's name: %v, %v; want %s", got, err, oldIDs[1])
	}
	if _, err := auth.Create(ctx, db.Ent, auth.Operator, "alice", ""); err != nil {
		t.Errorf("new token named alice once the older ones are revoked: %v", err)
	}
}

// A method declared self-checked (a replica's Poke) reaches its handler
// without a token; the rest of its service is refused whatever the caller
// sends, and other services still ask for their tokens. A method of a
// service tokens admit cannot be opened this way.
func TestOnlySelfCheckedMethodsSkipTheToken(t *testing.T) {
	const cluster, operator, peer = "deploysync.ctrl.v1.ClusterService", "deploysync.ctrl.v1.OperatorService", "deploysync.ctrl.v1.PeerService"
	a := auth.NewAuthenticator(nil, cluster, operator) // no token is looked up here
	a.SelfChecked("/" + peer + "/Poke")
	call := func(method string) (reached bool, err error) {
		_, err = a.Unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
			reached = true
			return nil, nil
		})
		return reached, err
	}
	if reached, err := call("/" + peer + "/Poke"); !reached || err != nil {
		t.Fatalf("Poke: reached %v, %v; want its handler", reached, err)
	}
	for method, want := range map[string]codes.Code{
		"/" + peer + "/Other":                codes.PermissionDenied,
		"/" + cluster + "/ReportAgentStatus": codes.Unauthenticated,
		"/" + operator + "/Poke":             codes.Unauthenticated,
	} {
		if reached, err := call(method); reached || status.Code(err) != want {
			t.Errorf("%s: reached %v, %v; want %v", method, reached, err, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("an operator method was opened to tokenless callers")
		}
	}()
	a.SelfChecked("/" + operator + "/ListRegions")
}

// Rotating a leaked agent token: a new token for the region gets the same
// default name as the old one. Revoking that name is refused, naming both
// tokens' IDs, and revokes nothing; revoking the old token's ID cuts off
// the old token alone, and the new one goes on working. An unknown ID
// revokes nothing either.
func TestRevokingARotatedAgentTokenLeavesTheNewOne(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	oldToken, newToken := env.AgentToken("eu"), env.AgentToken("eu") // both "agent-eu"
	oldID, newID := auth.TokenID(oldToken), auth.TokenID(newToken)
	report := func(token string) error {
		_, err := ctrlv1.NewClusterServiceClient(env.Dial(token)).ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "a"})
		return err
	}
	live := func() []string {
		tokens, err := auth.List(ctx, env.DB.Ent, false)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tok := range tokens {
			ids = append(ids, tok.ID)
		}
		return ids
	}
	if got := live(); !slices.Equal(got, []string{oldID, newID}) {
		t.Fatalf("live tokens %v, want the IDs given at creation %v", got, []string{oldID, newID})
	}

	_, err := auth.Revoke(ctx, env.DB.Ent, auth.Agent, "agent-eu")
	if !errors.Is(err, auth.ErrAmbiguous) || !strings.Contains(err.Error(), oldID) || !strings.Contains(err.Error(), newID) {
		t.Fatalf("revoke agent-eu, the name both share: got %v, want ErrAmbiguous naming %s and %s", err, oldID, newID)
	}
	if _, err := auth.Revoke(ctx, env.DB.Ent, auth.Agent, "tok_000000000000"); !errors.Is(err, auth.ErrNoSuchToken) {
		t.Fatalf("revoke an unknown ID: got %v, want ErrNoSuchToken", err)
	}
	if got := live(); len(got) != 2 {
		t.Fatalf("refused revocations left %v live, want both tokens", got)
	}

	got, err := auth.Revoke(ctx, env.DB.Ent, auth.Agent, oldID)
	if err != nil || got.ID != oldID || got.Name != "agent-eu" || got.Region != "eu" {
		t.Fatalf("revoke %s: %v, %v", oldID, got, err)
	}
	if err := report(oldToken); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the old token after its revocation: got %v, want Unauthenticated", err)
	}
	if err := report(newToken); err != nil {
		t.Errorf("the new token after the old one's revocation: %v", err)
	}
	if got := live(); !slices.Equal(got, []string{newID}) {
		t.Errorf("live tokens %v, want only the new one %s", got, newID)
	}
	if _, err := auth.Create(ctx, env.DB.Ent, auth.Agent, oldID, "eu"); err == nil || !strings.Contains(err.Error(), "tok_") {
		t.Errorf("a token named like an ID: got %v, want refused", err)
	}
}
