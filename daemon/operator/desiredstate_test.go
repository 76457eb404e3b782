package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/viewhash"
	"github.com/deploysync/deploysync/internal/manifest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

const (
	desiredEnvSecret = "hunter2-desired-secret"
	desiredArgSecret = "--token=s3cr3t-arg"
)

// streamedState is the state region's stream sends an agent for
// deployment id on a full sync.
func streamedState(t *testing.T, env *servertest.Env, region, id string) *ctrlv1.DeploymentState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := env.Agent(region).WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: "agent-" + region})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("%s's stream ended before it sent deployment %s: %v", region, id, err)
		}
		if d := ev.GetDeployment(); d.GetDeployment().GetDeploymentId() == id {
			if d.GetAction() != ctrlv1.Action_ACTION_APPLY {
				t.Fatalf("%s's stream sends %s as %v", region, id, d.GetAction())
			}
			return d.GetDeployment()
		}
		if ev.GetBookmark().GetFullSyncDone() {
			t.Fatalf("%s's full sync ended without deployment %s", region, id)
		}
	}
}

func redactedText(v string) string { return fmt.Sprintf("<redacted, %d bytes>", len(v)) }

// GetDesiredState gives, per region, the state that region's stream sends
// the agent and the YAML of the objects the agent applies for it, env
// values and command arguments redacted in both; its hashes (the state's
// spec hash, the YAML's label and annotations) are those of the objects
// applied, secrets and all, keyed with the installation's secret.
func TestDesiredStateIsWhatTheStreamSends(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("dana")
	r := deployRequest()
	r.Regions, r.Replicas, r.Port = []string{"eu", "us"}, 3, 9000
	r.Env = map[string]string{"FOO": desiredEnvSecret, "BAR": "plain"}
	r.Command = []string{"/bin/app", desiredArgSecret}
	if _, err := op.Deploy(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "us", Replicas: 4}); err != nil {
		t.Fatal(err)
	}
	key, err := viewhash.Load(ctx, env.DB.Ent)
	if err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{"eu", "us"} {
		got, err := op.GetDesiredState(ctx, &ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: region})
		if err != nil {
			t.Fatalf("%s: %v", region, err)
		}
		sent := streamedState(t, env, region, "api")
		objects, err := manifest.NewDeployment(sent)
		if err != nil {
			t.Fatal(err)
		}
		if objects, err = objects.Rehashed(key.Of); err != nil {
			t.Fatal(err)
		}
		wantYAML, err := objects.YAML(redactedText)
		if err != nil {
			t.Fatal(err)
		}
		if got.GetYaml() != string(wantYAML) {
			t.Errorf("%s: YAML\n%s\nwant, as built from what the stream sends\n%s", region, got.GetYaml(), wantYAML)
		}
		want := proto.CloneOf(sent)
		want.SpecHash = key.Of(sent.GetSpecHash())
		if want.SpecHash == sent.GetSpecHash() || want.SpecHash == "" {
			t.Errorf("%s: spec hash %q shown for %q streamed", region, want.SpecHash, sent.GetSpecHash())
		}
		for name, v := range want.Env {
			want.Env[name] = redactedText(v)
		}
		for i, arg := range want.Command {
			want.Command[i] = redactedText(arg)
		}
		if !proto.Equal(got.GetDeployment(), want) {
			t.Errorf("%s: state %v\nwant what the stream sends, redacted: %v", region, got.GetDeployment(), want)
		}
		if wantReplicas := map[string]int32{"eu": 3, "us": 4}[region]; got.GetDeployment().GetReplicas() != wantReplicas ||
			!strings.Contains(got.GetYaml(), fmt.Sprintf("replicas: %d\n", wantReplicas)) {
			t.Errorf("%s: replicas %d in the state, want %d:\n%s", region, got.GetDeployment().GetReplicas(), wantReplicas, got.GetYaml())
		}
		all, _ := protojson.Marshal(got)
		for _, secret := range []string{desiredEnvSecret, desiredArgSecret, "plain"} {
			if strings.Contains(string(all), secret) {
				t.Errorf("%s: the answer shows %q: %s", region, secret, all)
			}
		}
	}
}

// Where the deployment does not run, NotFound says so; bad input is
// InvalidArgument naming the field; a read-only key may read it.
func TestDesiredStateRefusals(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("dana")
	r := deployRequest()
	r.Regions = []string{"eu", "us"}
	if _, err := op.Deploy(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu",
		Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  *ctrlv1.GetDesiredStateRequest
		code codes.Code
		says string
	}{
		{&ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: "eu"}, codes.NotFound, "does not run in region"},
		{&ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: "ap"}, codes.NotFound, "does not run in region"},
		{&ctrlv1.GetDesiredStateRequest{DeploymentId: "nope", Region: "us"}, codes.NotFound, "does not run in region"},
		{&ctrlv1.GetDesiredStateRequest{Region: "us"}, codes.InvalidArgument, "deployment_id"},
		{&ctrlv1.GetDesiredStateRequest{DeploymentId: "api"}, codes.InvalidArgument, "region"},
		{&ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: "US WEST"}, codes.InvalidArgument, "region"},
	} {
		_, err := op.GetDesiredState(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %v saying %q", c.req, err, c.code, c.says)
		}
	}

	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bob := ctrlv1.NewOperatorServiceClient(conn)
	if _, err := bob.GetDesiredState(ctx, &ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: "us"}); err != nil {
		t.Errorf("a read-only key's GetDesiredState: %v", err)
	}
}
