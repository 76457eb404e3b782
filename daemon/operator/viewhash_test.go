package operator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/manifest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// readOnly is an operator-service client with a read-only console key's
// session on srv, as the SSH console gets one.
func readOnly(t *testing.T, srv *server.Server) ctrlv1.OperatorServiceClient {
	t.Helper()
	credential, revoke := srv.Sessions.Mint(auth.SessionIdentity{Name: "mallory", Fingerprint: "SHA256:mallorykey",
		RemoteAddr: "198.51.100.9:40000", ReadOnly: true})
	t.Cleanup(revoke)
	conn, err := srv.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ctrlv1.NewOperatorServiceClient(conn)
}

// hexHash is what a spec or object hash looks like: sixteen hex digits.
var hexHash = regexp.MustCompile(`\b[0-9a-f]{16}\b`)

// seenHashes is every hash a viewer is shown for deployment "api" in
// region: the state's spec_hash, the YAML's label and annotations, and
// anything hash-like in the views that list it or its rollout.
func seenHashes(t *testing.T, op ctrlv1.OperatorServiceClient, region string) (state *ctrlv1.DeploymentState, yaml string, hashes map[string]string) {
	t.Helper()
	ctx := context.Background()
	got, err := op.GetDesiredState(ctx, &ctrlv1.GetDesiredStateRequest{DeploymentId: "api", Region: region})
	if err != nil {
		t.Fatal(err)
	}
	hashes = map[string]string{}
	add := func(where string, answer proto.Message) {
		b, err := protojson.Marshal(answer)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hexHash.FindAllString(string(b), -1) {
			hashes[h] = where
		}
	}
	add("GetDesiredState", got)
	for _, line := range strings.Split(got.GetYaml(), "\n") {
		where := "GetDesiredState's YAML"
		switch {
		case strings.Contains(line, manifest.SpecHashLabel+":"):
			where = "GetDesiredState's YAML, label " + manifest.SpecHashLabel
		case strings.Contains(line, manifest.HashAnnotation+":"):
			where = "GetDesiredState's YAML, annotation " + manifest.HashAnnotation
		}
		for _, h := range hexHash.FindAllString(line, -1) {
			hashes[h] = where
		}
	}
	if h := got.GetDeployment().GetSpecHash(); h != "" {
		hashes[h] += " and GetDesiredState's spec_hash"
	}
	list, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	add("ListDeployments", list)
	reg, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	add("GetRegion", reg)
	history, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	add("GetDeploymentHistory", history)
	rollouts, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rollouts.GetRollouts()) == 0 {
		t.Fatal("no rollout listed")
	}
	add("ListRollouts", rollouts)
	pending, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	add("ListPendingChanges", pending)
	return got.GetDeployment(), got.GetYaml(), hashes
}

// guessHashes is what the hash functions ctrld used before gave for state
// with env[name] = guess: the spec hash (desired.SpecHash over the spec)
// and the StatefulSet's hash annotation (internal/manifest), built once with
// that spec hash on the pod template and once with shownHash, the label a
// viewer saw.
func guessHashes(state *ctrlv1.DeploymentState, name, guess, shownHash string) []string {
	spec := desired.DeploymentSpec{Image: state.GetImage(), CPUMillicores: int(state.GetCpuMillicores()),
		MemoryMiB: int(state.GetMemoryMib()), Port: int(state.GetPort()), Command: state.GetCommand(), Env: map[string]string{}}
	for k, v := range state.GetEnv() {
		spec.Env[k] = v
	}
	spec.Env[name] = guess
	specHash := desired.SpecHash(spec)
	out := []string{specHash}
	for _, label := range []string{specHash, shownHash} {
		s := proto.CloneOf(state)
		s.Env = spec.Env
		s.SpecHash = label
		if objects, err := manifest.NewDeployment(s); err == nil {
			out = append(out, objects.StatefulSetHash) // the Service's holds no env
		}
	}
	return out
}

// A read-only key sees a deployment's state with its one secret, a
// 4-digit DB_PIN, redacted, and every other input to its hashes. Trying
// all 10,000 PINs with the hash functions ctrld computes (desired.SpecHash
// and the objects' annotations) matches none of the hashes it is shown:
// the state's spec_hash, the YAML's unkey.spec.hash label and
// deploysync.io/spec-hash annotations, and the views. The same guesses
// against what the region's agent is streamed find the PIN at once: the
// attack is the real one, and agents keep the real hash.
func TestReadOnlyKeyCannotGuessASecretFromTheHashes(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("dana")
	// Under waves, so that a rollout is in flight and its views are read too.
	if _, err := op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod",
		Strategy: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	pin := fmt.Sprintf("%04d", rand.IntN(10000))
	r := deployRequest()
	r.Regions, r.Env = []string{"eu", "us"}, map[string]string{"DB_PIN": pin}
	if _, err := op.Deploy(ctx, r); err != nil {
		t.Fatal(err)
	}
	state, yaml, seen := seenHashes(t, readOnly(t, env.Server), "eu")
	if len(seen) == 0 {
		t.Fatalf("no hash shown at all; the YAML:\n%s", yaml)
	}
	if state.GetEnv()["DB_PIN"] != redactedText(pin) {
		t.Fatalf("DB_PIN shown as %q", state.GetEnv()["DB_PIN"])
	}

	sent := streamedState(t, env, "eu", "api")
	streamed := map[string]bool{sent.GetSpecHash(): true}
	if objects, err := manifest.NewDeployment(sent); err == nil {
		streamed[objects.StatefulSetHash] = true
	}
	foundStreamed := ""
	var found []string
	for i := range 10000 {
		guess := fmt.Sprintf("%04d", i)
		for _, h := range guessHashes(state, "DB_PIN", guess, state.GetSpecHash()) {
			if where, ok := seen[h]; ok {
				found = append(found, fmt.Sprintf("DB_PIN=%s gives %s, shown in %s", guess, h, where))
			}
			if h == sent.GetSpecHash() {
				foundStreamed = guess
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("a read-only key's guesses match what it is shown (the PIN is %s):\n%s", pin, strings.Join(found, "\n"))
	}
	if foundStreamed != pin {
		t.Errorf("the guesses found %q in the streamed hash %s, want the PIN %s: the streamed hash is not desired.SpecHash of the spec",
			foundStreamed, sent.GetSpecHash(), pin)
	}
	if want := desired.SpecHash(desired.DeploymentSpec{Image: r.Image, CPUMillicores: int(r.CpuMillicores), MemoryMiB: int(r.MemoryMib),
		Port: int(sent.GetPort()), Env: r.Env}); sent.GetSpecHash() != want {
		t.Errorf("agents are streamed spec hash %s, want desired.SpecHash of the spec, %s", sent.GetSpecHash(), want)
	}
	if !strings.Contains(yaml, manifest.SpecHashLabel+": "+state.GetSpecHash()) {
		t.Errorf("the YAML's %s label is not the state's spec_hash %s:\n%s", manifest.SpecHashLabel, state.GetSpecHash(), yaml)
	}
}

// Two replicas on one database show one keyed hash for a spec, since they
// key it with the one secret the database holds; two deployments that run
// alike show one hash, and one whose secret differs another: views can
// still compare them. No answer holds the secret.
func TestReplicasShowOneKeyedHash(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	replica := env.StartReplica()
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("dana")
	for id, pin := range map[string]string{"api": "1234", "web": "1234", "db": "4321"} {
		r := deployRequest()
		r.DeploymentId, r.Env = id, map[string]string{"DB_PIN": pin}
		if _, err := op.Deploy(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	shown := func(op ctrlv1.OperatorServiceClient, id string) *ctrlv1.GetDesiredStateResponse {
		t.Helper()
		got, err := op.GetDesiredState(ctx, &ctrlv1.GetDesiredStateRequest{DeploymentId: id, Region: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first, second := readOnly(t, env.Server), readOnly(t, replica)
	a, b := shown(first, "api"), shown(second, "api")
	if !proto.Equal(a, b) {
		t.Errorf("replicas show api differently:\n%v\n%v", a, b)
	}
	if h := a.GetDeployment().GetSpecHash(); !hexHash.MatchString(h) || h == streamedState(t, env, "eu", "api").GetSpecHash() {
		t.Errorf("api's spec hash shown as %q, want sixteen hex digits, not the streamed hash", h)
	}
	if web := shown(second, "web").GetDeployment().GetSpecHash(); web != a.GetDeployment().GetSpecHash() {
		t.Errorf("web runs as api does but shows spec hash %s, api %s", web, a.GetDeployment().GetSpecHash())
	}
	if db := shown(first, "db").GetDeployment().GetSpecHash(); db == a.GetDeployment().GetSpecHash() {
		t.Errorf("db runs another DB_PIN than api but shows its spec hash %s", db)
	}
	secrets := env.DB.Ent.InstallationSecret.Query().AllX(ctx)
	if len(secrets) != 1 {
		t.Fatalf("%d installation secrets, want 1", len(secrets))
	}
	secret := fmt.Sprintf("%x", secrets[0].Value)
	for _, got := range []proto.Message{a, b} {
		if all, _ := protojson.Marshal(got); strings.Contains(string(all), secret) {
			t.Errorf("an answer shows the secret: %s", all)
		}
	}
}
