package auth_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
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
