package desired_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/validate"
)

func setup(t *testing.T) (*desired.Store, *ent.Client) {
	t.Helper()
	client := storetest.New(t).Ent
	s := desired.New(client)
	for _, r := range []string{"eu-west", "us-east", "ap-south"} {
		if err := s.EnsureRegion(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return s, client
}

func spec(id string) desired.DeploymentSpec {
	return desired.DeploymentSpec{
		ID: id, WorkspaceID: "ws1", EnvironmentID: "prod", Image: "ghcr.io/acme/api:v1",
		CPUMillicores: 250, MemoryMiB: 256, Port: 8080,
		Command: []string{"/api", "serve"}, Env: map[string]string{"LOG": "info"},
	}
}

func changes(t *testing.T, client *ent.Client) []string {
	t.Helper()
	rows, err := client.DeploymentChange.Query().Order(ent.Asc(deploymentchange.FieldID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s/%s/%s", r.ResourceType, r.ResourceID, r.Region))
	}
	return out
}

func TestDeployCreatesTopologyPerRegionInOneTransaction(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api-1"), []string{"eu-west", "us-east"}, 3); err != nil {
		t.Fatal(err)
	}
	c := changes(t, client)
	slices.Sort(c) // one transaction: the order within it means nothing
	got := strings.Join(c, " ")
	want := "deployment_topology/api-1/eu-west deployment_topology/api-1/us-east"
	if got != want {
		t.Fatalf("change rows %q, want %q", got, want)
	}
	tops := client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID("api-1")).AllX(ctx)
	if len(tops) != 2 || tops[0].Replicas != 3 || tops[0].DesiredStatus != desired.Running {
		t.Fatalf("topologies %+v", tops)
	}

	// A deploy naming one unknown region writes nothing at all.
	err := s.Deploy(ctx, spec("api-2"), []string{"eu-west", "mars-1"}, 1)
	if !errors.Is(err, desired.ErrUnknownRegion) || !strings.Contains(err.Error(), "mars-1") {
		t.Fatalf("got %v, want ErrUnknownRegion naming mars-1", err)
	}
	if client.Deployment.Query().CountX(ctx) != 1 || len(changes(t, client)) != 2 {
		t.Fatal("failed deploy wrote state or change rows")
	}
	if err := s.Deploy(ctx, spec("api-1"), []string{"eu-west"}, 1); !errors.Is(err, desired.ErrAlreadyExists) {
		t.Fatalf("redeploying an existing ID: got %v, want ErrAlreadyExists", err)
	}
}

func TestStopStartAndScalePerRegion(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api-1"), []string{"eu-west", "us-east"}, 3); err != nil {
		t.Fatal(err)
	}
	base := len(changes(t, client))

	if err := s.SetDesiredStatus(ctx, "api-1", "eu-west", desired.Stopped); err != nil {
		t.Fatal(err)
	}
	if err := s.Scale(ctx, "api-1", "us-east", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDesiredStatus(ctx, "api-1", "", desired.Running); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(changes(t, client)[base:], " ")
	want := "deployment_topology/api-1/eu-west deployment_topology/api-1/us-east " +
		"deployment_topology/api-1/eu-west deployment_topology/api-1/us-east"
	if got != want {
		t.Fatalf("change rows %q, want %q", got, want)
	}
	us := client.DeploymentTopology.Query().Where(deploymenttopology.Region("us-east")).OnlyX(ctx)
	if us.Replicas != 5 || us.DesiredStatus != desired.Running {
		t.Fatalf("us-east topology %+v", us)
	}

	for name, err := range map[string]error{
		"stop in a region it does not run in": s.SetDesiredStatus(ctx, "api-1", "ap-south", desired.Stopped),
		"scale an unknown deployment":         s.Scale(ctx, "nope", "", 1),
	} {
		if !errors.Is(err, desired.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", name, err)
		}
	}
	if err := s.Scale(ctx, "api-1", "mars-1", 1); !errors.Is(err, desired.ErrUnknownRegion) {
		t.Errorf("scale in unknown region: got %v", err)
	}
}

// EnsureSentinel updates desired fields on an existing sentinel and keeps
// what the agent reported.
func TestEnsureSentinelKeepsActualState(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	in := desired.SentinelSpec{ID: "sen-1", WorkspaceID: "ws1", EnvironmentID: "prod", Region: "eu-west",
		Image: "sentinel:1", Replicas: 2, CPUMillicores: 100, MemoryMiB: 128}
	id, err := s.EnsureSentinel(ctx, in)
	if err != nil || id != "sen-1" {
		t.Fatalf("ensure: %q, %v", id, err)
	}
	err = client.Sentinel.UpdateOneID(id).SetAvailableReplicas(2).SetHealth(sentinel.HealthHealthy).
		Exec(changefeed.ActualState(ctx))
	if err != nil {
		t.Fatal(err)
	}
	in.ID, in.Image = "sen-other", "sentinel:2"
	id, err = s.EnsureSentinel(ctx, in)
	if err != nil || id != "sen-1" {
		t.Fatalf("second ensure returned %q, %v; want the existing sen-1", id, err)
	}
	got := client.Sentinel.GetX(ctx, "sen-1")
	if got.Image != "sentinel:2" || got.AvailableReplicas != 2 || got.Health != sentinel.HealthHealthy {
		t.Fatalf("sentinel after update %+v", got)
	}
	if c := changes(t, client); len(c) != 2 || c[1] != "sentinel/sen-1/eu-west" {
		t.Fatalf("change rows %v", c)
	}
	if err := s.DeleteSentinel(ctx, "sen-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSentinel(ctx, "sen-1"); !errors.Is(err, desired.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
}

func TestEnsureCiliumPolicyAndDeploymentDelete(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api-1"), []string{"eu-west"}, 1); err != nil {
		t.Fatal(err)
	}
	p := desired.PolicySpec{ID: "pol-1", WorkspaceID: "ws1", EnvironmentID: "prod", DeploymentID: "api-1",
		Region: "eu-west", Name: "allow-api", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}
	if id, err := s.EnsureCiliumPolicy(ctx, p); err != nil || id != "pol-1" {
		t.Fatalf("ensure policy: %q %v", id, err)
	}
	p.ID, p.Spec = "pol-2", map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "ingress": []any{map[string]any{}}}
	if id, err := s.EnsureCiliumPolicy(ctx, p); err != nil || id != "pol-1" {
		t.Fatalf("update policy: %q %v", id, err)
	}
	if err := s.DeleteDeployment(ctx, "api-1"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(changes(t, client), " ")
	want := "deployment_topology/api-1/eu-west cilium_network_policy/pol-1/eu-west cilium_network_policy/pol-1/eu-west " +
		"deployment_topology/api-1/eu-west cilium_network_policy/pol-1/eu-west"
	if got != want {
		t.Fatalf("change rows\n got  %s\n want %s", got, want)
	}
	if client.CiliumNetworkPolicy.Query().CountX(ctx) != 0 || client.DeploymentTopology.Query().CountX(ctx) != 0 {
		t.Fatal("deployment delete left its policies or topologies")
	}
}

// A sentinel or policy ID is one row's: putting another environment's (or
// region's, or name's) resource under it is refused with AlreadyExists and
// changes nothing. Without the check, MySQL's upsert updates the row that
// owns the ID (its primary key collides first) while the change row names
// another resource. A policy's owner cannot change by a put either: the
// database cascades policies away with their deployment.
func TestEnsureRefusesAnIDOfAnotherResourceAndAnOwnerChange(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	sen := func(id, env string) desired.SentinelSpec {
		return desired.SentinelSpec{ID: id, WorkspaceID: "ws1", EnvironmentID: env, Region: "eu-west",
			Image: "sentinel:1", Replicas: 1, CPUMillicores: 100, MemoryMiB: 128}
	}
	for _, in := range []desired.SentinelSpec{sen("sen-1", "e1"), sen("sen-2", "e2")} {
		if _, err := s.EnsureSentinel(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Deploy(ctx, spec("api-1"), []string{"eu-west"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Deploy(ctx, spec("api-2"), []string{"eu-west"}, 1); err != nil {
		t.Fatal(err)
	}
	pol := func(id, dep, name string) desired.PolicySpec {
		return desired.PolicySpec{ID: id, WorkspaceID: "ws1", EnvironmentID: "prod", DeploymentID: dep,
			Region: "eu-west", Name: name, Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}
	}
	if _, err := s.EnsureCiliumPolicy(ctx, pol("pol-1", "api-1", "allow-api")); err != nil {
		t.Fatal(err)
	}
	before := changes(t, client)

	taken := sen("sen-1", "e2") // e2's sentinel, under e1's ID
	taken.Image = "sentinel:evil"
	if _, err := s.EnsureSentinel(ctx, taken); !errors.Is(err, desired.ErrAlreadyExists) {
		t.Errorf("sentinel under another environment's ID: got %v, want ErrAlreadyExists", err)
	}
	if _, err := s.EnsureSentinel(ctx, sen("sen-1", "e3")); !errors.Is(err, desired.ErrAlreadyExists) {
		t.Errorf("new sentinel under a used ID: got %v, want ErrAlreadyExists", err)
	}
	if _, err := s.EnsureCiliumPolicy(ctx, pol("pol-1", "api-1", "other-name")); !errors.Is(err, desired.ErrAlreadyExists) {
		t.Errorf("policy under another policy's ID: got %v, want ErrAlreadyExists", err)
	}
	if _, err := s.EnsureCiliumPolicy(ctx, pol("pol-9", "api-2", "allow-api")); !errors.Is(err, desired.ErrConflict) || !strings.Contains(err.Error(), "deployment_id") {
		t.Errorf("policy moved to another deployment by a put: got %v, want ErrConflict naming deployment_id", err)
	}
	if got := client.Sentinel.GetX(ctx, "sen-1"); got.EnvironmentID != "e1" || got.Image != "sentinel:1" {
		t.Errorf("refused put changed sen-1: %+v", got)
	}
	if got := client.CiliumNetworkPolicy.GetX(ctx, "pol-1"); *got.DeploymentID != "api-1" || got.Name != "allow-api" {
		t.Errorf("refused put changed pol-1: %+v", got)
	}
	if after := changes(t, client); !slices.Equal(after, before) {
		t.Errorf("refused puts wrote change rows %v", after[len(before):])
	}
}

// Every invalid value is rejected with ErrInvalid (or ErrUnknownRegion)
// naming the field, and nothing is written: among them the values
// Kubernetes, a process or the database cannot hold.
func TestInvalidValuesAreRejectedNamingTheField(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	deployWith := func(mut func(*desired.DeploymentSpec), regions []string, replicas int) error {
		sp := spec("api-1")
		mut(&sp)
		return s.Deploy(ctx, sp, regions, replicas)
	}
	ok := []string{"eu-west"}
	same := func(*desired.DeploymentSpec) {}
	sentinelWith := func(mut func(*desired.SentinelSpec)) error {
		sp := desired.SentinelSpec{ID: "sen-1", WorkspaceID: "ws1", EnvironmentID: "prod", Region: "eu-west",
			Image: "sentinel:1", Replicas: 1, CPUMillicores: 100, MemoryMiB: 64}
		mut(&sp)
		_, err := s.EnsureSentinel(ctx, sp)
		return err
	}
	policyWith := func(mut func(*desired.PolicySpec)) error {
		sp := desired.PolicySpec{ID: "pol-1", WorkspaceID: "ws1", EnvironmentID: "prod", Region: "eu-west",
			Name: "allow", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}
		mut(&sp)
		_, err := s.EnsureCiliumPolicy(ctx, sp)
		return err
	}
	cases := []struct {
		field string
		err   error
	}{
		{"id", deployWith(func(d *desired.DeploymentSpec) { d.ID = "" }, ok, 1)},
		{"id", deployWith(func(d *desired.DeploymentSpec) { d.ID = "Bad_ID" }, ok, 1)},
		{"deployment_id", deployWith(func(d *desired.DeploymentSpec) { d.ID = "sentinel-gw" }, ok, 1)},
		{"workspace_id", deployWith(func(d *desired.DeploymentSpec) { d.WorkspaceID = "" }, ok, 1)},
		{"environment_id", deployWith(func(d *desired.DeploymentSpec) { d.EnvironmentID = "x y" }, ok, 1)},
		{"image", deployWith(func(d *desired.DeploymentSpec) { d.Image = "" }, ok, 1)},
		{"image", deployWith(func(d *desired.DeploymentSpec) { d.Image = "Not An Image!" }, ok, 1)},
		{"cpu_millicores", deployWith(func(d *desired.DeploymentSpec) { d.CPUMillicores = 0 }, ok, 1)},
		{"memory_mib", deployWith(func(d *desired.DeploymentSpec) { d.MemoryMiB = -1 }, ok, 1)},
		{"cpu_millicores", deployWith(func(d *desired.DeploymentSpec) { d.CPUMillicores = math.MaxInt32 }, ok, 1)},
		{"memory_mib", deployWith(func(d *desired.DeploymentSpec) { d.MemoryMiB = math.MaxInt32 }, ok, 1)},
		{"port", deployWith(func(d *desired.DeploymentSpec) { d.Port = 70000 }, ok, 1)},
		{"port", deployWith(func(d *desired.DeploymentSpec) { d.Port = -1 }, ok, 1)},
		{"env", deployWith(func(d *desired.DeploymentSpec) { d.Env = map[string]string{"A=B": "x"} }, ok, 1)},
		{"env", deployWith(func(d *desired.DeploymentSpec) { d.Env = map[string]string{"TOKEN": "abc\x00def"} }, ok, 1)},
		{"env", deployWith(func(d *desired.DeploymentSpec) { d.Env = map[string]string{"TOKEN": "\xff\xfe"} }, ok, 1)},
		{"env", deployWith(func(d *desired.DeploymentSpec) { d.Env = map[string]string{"BIG": strings.Repeat("x", 3<<20)} }, ok, 1)},
		{"command", deployWith(func(d *desired.DeploymentSpec) { d.Command = []string{"/api", "--name=\x00"} }, ok, 1)},
		{"command", deployWith(func(d *desired.DeploymentSpec) { d.Command = []string{strings.Repeat("x", 200<<10)} }, ok, 1)},
		{"replicas", deployWith(same, ok, 1001)},
		{"replicas", deployWith(same, ok, -1)},
		{"region", deployWith(same, []string{""}, 1)},
		{"region", deployWith(same, []string{"EU_West"}, 1)},
		{"region", deployWith(same, []string{"mars-1"}, 1)},
		{"regions", deployWith(same, nil, 1)},
		{"regions", deployWith(same, []string{"eu-west", "eu-west"}, 1)},
		{"replicas", s.Scale(ctx, "api-1", "eu-west", 5000)},
		{"desired_status", s.SetDesiredStatus(ctx, "api-1", "eu-west", "paused")},
		{"image", sentinelWith(func(sp *desired.SentinelSpec) { sp.Image = "UPPER:case" })},
		{"replicas", sentinelWith(func(sp *desired.SentinelSpec) { sp.Replicas = 1001 })},
		{"cpu_millicores", sentinelWith(func(sp *desired.SentinelSpec) { sp.CPUMillicores = 0 })},
		{"cpu_millicores", sentinelWith(func(sp *desired.SentinelSpec) { sp.CPUMillicores = math.MaxInt32 })},
		{"memory_mib", sentinelWith(func(sp *desired.SentinelSpec) { sp.MemoryMiB = 0 })},
		{"memory_mib", sentinelWith(func(sp *desired.SentinelSpec) { sp.MemoryMiB = math.MaxInt32 })},
		{"id", sentinelWith(func(sp *desired.SentinelSpec) { sp.ID = "" })},
		{"region", sentinelWith(func(sp *desired.SentinelSpec) { sp.Region = "" })},
		{"name", policyWith(func(sp *desired.PolicySpec) { sp.Name = "Not/Valid" })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = nil })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = map[string]any{"x": 1} })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = map[string]any{"description": math.NaN()} })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = map[string]any{"labels": []any{math.Inf(1)}} })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { // as the API receives it
			sp.Spec = validate.StructMap(&structpb.Struct{Fields: map[string]*structpb.Value{"description": structpb.NewNumberValue(math.NaN())}})
		})},
		{"spec", policyWith(func(sp *desired.PolicySpec) { // Cilium: "rule cannot have NodeSelector"
			sp.Spec = map[string]any{"nodeSelector": map[string]any{}, "ingress": []any{map[string]any{}}}
		})},
		{"spec", policyWith(func(sp *desired.PolicySpec) {
			sp.Spec = map[string]any{"endpointSelector": map[string]any{}, "egress": []any{}}
		})},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = nestedSpec(90) })},
		{"spec", policyWith(func(sp *desired.PolicySpec) { sp.Spec = nestedSpec(validate.MaxJSONDepth + 1) })},
		{"deployment_id", policyWith(func(sp *desired.PolicySpec) { sp.DeploymentID = "Bad_ID" })},
	}
	for i, c := range cases {
		if c.err == nil {
			t.Errorf("case %d (%s): invalid value accepted", i, c.field)
			continue
		}
		msg := c.err.Error()
		named := strings.Contains(msg, "."+c.field+`"`) || // ent: validator failed for field "Deployment.image"
			strings.HasPrefix(msg, c.field+":") || strings.HasPrefix(msg, c.field+" ")
		if !named {
			t.Errorf("case %d: error %q does not name field %q", i, c.err, c.field)
		}
		if !errors.Is(c.err, desired.ErrInvalid) && !errors.Is(c.err, desired.ErrUnknownRegion) {
			t.Errorf("case %d (%s): got %v, want ErrInvalid (InvalidArgument)", i, c.field, c.err)
		}
	}
	if got, want := written(t, client), "0 deployments, 0 topologies, 0 sentinels, 0 policies, 0 namespaces; changes []"; got != want {
		t.Errorf("rejected writes left %s", got)
	}
}

// written sums up what the database holds: state rows, namespace claims and
// change rows. A refused call leaves it as it was.
func written(t *testing.T, client *ent.Client) string {
	t.Helper()
	ctx := context.Background()
	return fmt.Sprintf("%d deployments, %d topologies, %d sentinels, %d policies, %d namespaces; changes %v",
		client.Deployment.Query().CountX(ctx), client.DeploymentTopology.Query().CountX(ctx),
		client.Sentinel.Query().CountX(ctx), client.CiliumNetworkPolicy.Query().CountX(ctx),
		client.Namespace.Query().CountX(ctx), changes(t, client))
}

// nestedSpec is a policy spec whose ingress rule holds objects depth levels
// deep, counting the spec itself (level 1) and the ingress list (level 2).
func nestedSpec(depth int) map[string]any {
	var v any = map[string]any{}
	for range depth - 3 {
		v = map[string]any{"a": v}
	}
	return map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{v}}
}

// A policy owned by a deployment goes only where that deployment runs: its
// region (else the deployment's ID reaches a region's stream that has
// nothing of it) and its workspace and environment. Anything else is
// refused with ErrConflict, or ErrNotFound for no such deployment, and
// writes nothing.
func TestPolicyOwnerMustRunWhereThePolicyGoes(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api-1"), []string{"us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	other := spec("api-2")
	other.EnvironmentID = "staging"
	if err := s.Deploy(ctx, other, []string{"eu-west"}, 1); err != nil {
		t.Fatal(err)
	}
	before := written(t, client)
	pol := func(dep, region string) desired.PolicySpec {
		return desired.PolicySpec{ID: "pol-1", WorkspaceID: "ws1", EnvironmentID: "prod", DeploymentID: dep,
			Region: region, Name: "allow-api", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}
	}
	for _, c := range []struct {
		name string
		in   desired.PolicySpec
		want error
		says string
	}{
		{"in a region the deployment does not run in", pol("api-1", "eu-west"), desired.ErrConflict, "does not run in region eu-west"},
		{"in another environment than the deployment's", pol("api-2", "eu-west"), desired.ErrConflict, "workspace ws1 environment staging's"},
		{"of a deployment that does not exist", pol("api-9", "us-east"), desired.ErrNotFound, `"api-9"`},
	} {
		_, err := s.EnsureCiliumPolicy(ctx, c.in)
		if !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "deployment_id:") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("policy %s: got %v, want %v naming deployment_id and saying %q", c.name, err, c.want, c.says)
		}
	}
	if after := written(t, client); after != before {
		t.Errorf("refused policies changed the database:\n before %s\n after  %s", before, after)
	}
	if _, err := s.EnsureCiliumPolicy(ctx, pol("api-1", "us-east")); err != nil {
		t.Errorf("policy where its deployment runs: %v", err)
	}
}
