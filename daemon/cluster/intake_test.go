package cluster_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/instance"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// wantInvalid fails unless err is InvalidArgument naming field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("%s: got %v, want InvalidArgument", what, err)
		return
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, field) {
		t.Errorf("%s: message %q does not name %s", what, msg, field)
	}
}

// deploy creates deployment id running in regions.
func deploy(t *testing.T, op ctrlv1.OperatorServiceClient, id string, regions ...string) {
	t.Helper()
	if _, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: regions, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
}

// An acked version ctrld never issued is refused and stored nowhere: one
// agent token cannot plant a cursor that breaks the console or hides its
// region's lag. Up to the newest version is taken.
func TestAckedVersionBeyondWhatCtrldIssuedIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	head := regions.Regions[0].HeadVersion

	for _, v := range []uint64{1 << 63, math.MaxUint64, head + 1} {
		_, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "hostile", AckedVersion: v})
		wantInvalid(t, fmt.Sprintf("acked_version %d", v), err, "acked_version")
	}
	if n := env.DB.Ent.Agent.Query().CountX(ctx); n != 0 {
		t.Errorf("refused heartbeats left %d agent records", n)
	}
	if _, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); err != nil {
		t.Errorf("ListRegions after the refused heartbeats: %v", err)
	}

	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0", AckedVersion: head}); err != nil {
		t.Fatalf("heartbeat acking the head version %d: %v", head, err)
	}
}

// last_full_sync must be a valid timestamp no earlier than 2000 and not
// ahead of ctrld's clock by more than the allowed skew; otherwise the
// heartbeat is refused naming it (the database refused a year-10000 time,
// which came back as Unavailable).
func TestLastFullSyncOutsideTheSaneWindowIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	report := func(ts *timestamppb.Timestamp) error {
		_, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0", LastFullSync: ts})
		return err
	}
	now := time.Now()
	for what, ts := range map[string]*timestamppb.Timestamp{
		"year 10000":      timestamppb.New(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)),
		"nanos too large": {Seconds: now.Unix(), Nanos: 1e9},
		"before 2000":     timestamppb.New(time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)),
		"an hour ahead":   timestamppb.New(now.Add(time.Hour)),
	} {
		wantInvalid(t, what, report(ts), "last_full_sync")
	}
	if n := env.DB.Ent.Agent.Query().CountX(ctx); n != 0 {
		t.Errorf("refused heartbeats left %d agent records", n)
	}
	// A clock a little ahead of ctrld's is no reason to refuse.
	if err := report(timestamppb.New(now.Add(time.Minute))); err != nil {
		t.Errorf("last full sync a minute ahead: %v", err)
	}
}

// Instances carry sizes an agent read from its Pods; negative ones are no
// Pod's and are refused naming the field, with nothing stored.
func TestNegativeInstanceSizesAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	deploy(t, env.Operator("alice"), "api", "eu")
	for field, in := range map[string]*ctrlv1.Instance{
		"cpu_millicores": {PodName: "api-0", CpuMillicores: -1},
		"memory_mib":     {PodName: "api-0", MemoryMib: math.MinInt32},
	} {
		_, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu",
			Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "api", Instances: []*ctrlv1.Instance{in}}}})
		wantInvalid(t, field, err, "deployments[0].instances[0]."+field)
	}
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 0 {
		t.Errorf("refused reports stored %d instances", n)
	}
}

// An agent speaks only for what is desired in its own region: its report
// for a deployment that runs only elsewhere stores no instance and leaves
// that deployment's workflow pending, while the rest of the same report is
// applied.
func TestDeploymentReportsCountOnlyInTheAgentsRegion(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	eu := env.Agent("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	deploy(t, op, "us-only", "us")
	deploy(t, op, "eu-only", "eu")
	running := []*ctrlv1.Instance{{PodName: "x-0", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true}}
	_, err := eu.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu", Deployments: []*ctrlv1.DeploymentStatus{
		{DeploymentId: "us-only", Instances: running},
		{DeploymentId: "eu-only", Instances: running},
	}})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if n := env.DB.Ent.Instance.Query().Where(instance.DeploymentID("us-only")).CountX(ctx); n != 0 {
		t.Errorf("eu's report stored %d instances of a deployment that runs only in us", n)
	}
	if n := env.DB.Ent.Instance.Query().Where(instance.DeploymentID("eu-only"), instance.Region("eu")).CountX(ctx); n != 1 {
		t.Errorf("eu's own deployment has %d instances, want the 1 reported", n)
	}
	driver := workflow.New(env.DB.Ent, workflow.Config{}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	if err := driver.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.DB.Ent.Deployment.GetX(ctx, "us-only").WorkflowStatus; got != deployment.WorkflowStatusPending {
		t.Errorf("us-only workflow %s after eu's report, want pending", got)
	}
	if got := env.DB.Ent.Deployment.GetX(ctx, "eu-only").WorkflowStatus; got != deployment.WorkflowStatusReady {
		t.Errorf("eu-only workflow %s after its report, want ready", got)
	}
}

// A report locks only the deployments it touches, those of the agent's
// region: eu's report, even one listing a us deployment, does not wait for
// a transaction writing that us deployment. (It did: it share-locked every
// listed deployment, and through the workflow status index, which the
// database scans for such a lock on a small table, every deployment.)
func TestADeploymentReportDoesNotWaitForAnotherRegionsWriters(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	eu := env.Agent("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	deploy(t, op, "us-only", "us")
	deploy(t, op, "eu-a", "eu")
	deploy(t, op, "eu-b", "eu")

	// A transaction moving us-only's workflow on, as the workflow driver
	// does, held open.
	tx, err := env.DB.Ent.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.Deployment.UpdateOneID("us-only").SetWorkflowStatus(deployment.WorkflowStatusDeploying).
		Exec(changefeed.ActualState(ctx)); err != nil {
		t.Fatal(err)
	}

	// Generous: the database's lock wait timeout is 50 seconds.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	running := []*ctrlv1.Instance{{PodName: "x-0", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true}}
	_, err = eu.ReportDeploymentStatus(rctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu", Deployments: []*ctrlv1.DeploymentStatus{
		{DeploymentId: "us-only", Instances: running},
		{DeploymentId: "eu-a", Instances: running},
		{DeploymentId: "eu-b", Instances: running},
	}})
	if err != nil {
		t.Fatalf("eu's report while a transaction writes us-only: %v", err)
	}
	if n := env.DB.Ent.Instance.Query().Where(instance.Region("eu")).CountX(ctx); n != 2 {
		t.Errorf("eu's deployments have %d instances, want the 2 reported", n)
	}
}

// Sentinel reports are bound to the region too: eu's report for a us
// sentinel changes nothing.
func TestSentinelReportsCountOnlyInTheAgentsRegion(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	eu := env.Agent("eu")
	env.AgentToken("us")
	if _, err := env.Operator("alice").PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "ws",
		EnvironmentId: "prod", Region: "us", Image: "gw:1", Replicas: 1, CpuMillicores: 1, MemoryMib: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := eu.ReportSentinelStatus(ctx, &ctrlv1.ReportSentinelStatusRequest{Region: "eu", Sentinels: []*ctrlv1.SentinelStatus{
		{SentinelId: "gw", AvailableReplicas: 5, Health: ctrlv1.SentinelHealth_SENTINEL_HEALTH_HEALTHY}}}); err != nil {
		t.Fatalf("report: %v", err)
	}
	if s := env.DB.Ent.Sentinel.GetX(ctx, "gw"); s.AvailableReplicas != 0 || s.Health == "healthy" {
		t.Errorf("eu's report changed the us sentinel: %d available, %s", s.AvailableReplicas, s.Health)
	}
}

// A sentinel report sets each listed sentinel of the region to its
// status; sentinels it does not list, and ones the region does not have,
// are left as they are.
func TestSentinelReportsSetEachListedSentinelsStatus(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	eu := env.Agent("eu")
	op := env.Operator("alice")
	for _, id := range []string{"gw-a", "gw-b", "gw-c", "gw-d"} { // an environment has one sentinel per region
		if _, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: id, WorkspaceId: "ws",
			EnvironmentId: "env-" + id, Region: "eu", Image: "gw:1", Replicas: 3, CpuMillicores: 1, MemoryMib: 1}); err != nil {
			t.Fatal(err)
		}
	}
	healthy, unhealthy := ctrlv1.SentinelHealth_SENTINEL_HEALTH_HEALTHY, ctrlv1.SentinelHealth_SENTINEL_HEALTH_UNHEALTHY
	_, err := eu.ReportSentinelStatus(ctx, &ctrlv1.ReportSentinelStatusRequest{Region: "eu", Sentinels: []*ctrlv1.SentinelStatus{
		{SentinelId: "gw-a", AvailableReplicas: 3, Health: healthy},
		{SentinelId: "gw-b", AvailableReplicas: 3, Health: healthy},
		{SentinelId: "gw-c", AvailableReplicas: 0, Health: unhealthy},
		{SentinelId: "not-here", AvailableReplicas: 3, Health: healthy},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]struct {
		available int
		health    string
	}{"gw-a": {3, "healthy"}, "gw-b": {3, "healthy"}, "gw-c": {0, "unhealthy"}, "gw-d": {0, "unknown"}} {
		s := env.DB.Ent.Sentinel.GetX(ctx, id)
		if s.AvailableReplicas != want.available || string(s.Health) != want.health {
			t.Errorf("%s: %d available, %s; want %d, %s", id, s.AvailableReplicas, s.Health, want.available, want.health)
		}
	}
}

// report sends eu's deployment report of deployments.
func report(agent ctrlv1.ClusterServiceClient, deployments ...*ctrlv1.DeploymentStatus) error {
	_, err := agent.ReportDeploymentStatus(context.Background(), &ctrlv1.ReportDeploymentStatusRequest{Region: "eu", Deployments: deployments})
	return err
}

// A deployment listed twice in one report is refused naming the second
// copy (each copy re-ran its instance upsert and delete under the
// deployment's lock), as is a Pod listed twice under one deployment; the
// refused report writes nothing.
func TestADeploymentOrPodListedTwiceInOneReportIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	deploy(t, op, "web", "eu")
	running := func(pods ...string) []*ctrlv1.Instance {
		var out []*ctrlv1.Instance
		for _, p := range pods {
			out = append(out, &ctrlv1.Instance{PodName: p, Address: "10.0.0.1", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true})
		}
		return out
	}
	err := report(agent,
		&ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: running("api-0")},
		&ctrlv1.DeploymentStatus{DeploymentId: "web", Instances: running("web-0")},
		&ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: running("api-1")})
	wantInvalid(t, "a deployment listed twice", err, "deployments[2].deployment_id")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "listed twice (also deployments[0])") {
		t.Errorf("message %q does not say which entries are the same", msg)
	}
	err = report(agent, &ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: running("api-0", "api-1", "api-0")})
	wantInvalid(t, "a Pod listed twice", err, "deployments[0].instances[2].pod_name")
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 0 {
		t.Errorf("refused reports stored %d instances", n)
	}

	if err := report(agent,
		&ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: running("api-0", "api-1")},
		&ctrlv1.DeploymentStatus{DeploymentId: "web", Instances: running("api-0")}); err != nil {
		t.Fatalf("a report listing each once (one Pod name under two deployments): %v", err)
	}
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 3 {
		t.Errorf("%d instances stored, want the 3 reported", n)
	}
}

// A Pod's name is a DNS subdomain and its address an IP (or empty before
// it has one): anything else (terminal escapes, "not an address") is no
// Pod's, and is refused naming the field and its index, with nothing of the
// report stored, the good deployments before the bad one included.
func TestInstancesThatNoPodCouldHaveAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	deploy(t, op, "web", "eu")
	good := &ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: []*ctrlv1.Instance{{PodName: "api-0", Address: "10.0.0.1"}}}
	for _, c := range []struct {
		what, field string
		in          *ctrlv1.Instance
	}{
		{"escape sequences", "pod_name", &ctrlv1.Instance{PodName: "p\x00\x1b[2J", Address: "10.0.0.2"}},
		{"upper case", "pod_name", &ctrlv1.Instance{PodName: "Web-0"}},
		{"an underscore", "pod_name", &ctrlv1.Instance{PodName: "web_0"}},
		{"a bidi override", "pod_name", &ctrlv1.Instance{PodName: "web-0\u202e"}},
		{"empty", "pod_name", &ctrlv1.Instance{PodName: ""}},
		{"over 253 characters", "pod_name", &ctrlv1.Instance{PodName: strings.Repeat("w", 254)}},
		{"words", "address", &ctrlv1.Instance{PodName: "web-0", Address: "not an address"}},
		{"a host name", "address", &ctrlv1.Instance{PodName: "web-0", Address: "web.example.com"}},
		{"three parts", "address", &ctrlv1.Instance{PodName: "web-0", Address: "1.2.3"}},
		{"a port", "address", &ctrlv1.Instance{PodName: "web-0", Address: "10.0.0.2:80"}},
		{"a zone", "address", &ctrlv1.Instance{PodName: "web-0", Address: "fe80::1%eth0"}},
		{"escape sequences", "address", &ctrlv1.Instance{PodName: "web-0", Address: "\x1b[2J"}},
	} {
		err := report(agent, good, &ctrlv1.DeploymentStatus{DeploymentId: "web",
			Instances: []*ctrlv1.Instance{{PodName: "web-9", Address: "10.0.0.9"}, c.in}})
		wantInvalid(t, c.field+" with "+c.what, err, "deployments[1].instances[1]."+c.field)
	}
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 0 {
		t.Errorf("refused reports stored %d instances", n)
	}

	// What real Pods have is taken: a generated name with dots, an IPv4
	// or IPv6 address, or none yet.
	err := report(agent, &ctrlv1.DeploymentStatus{DeploymentId: "web", Instances: []*ctrlv1.Instance{
		{PodName: "web-7d9f8c-x2x4z", Address: "10.0.0.2"},
		{PodName: "web.canary-0", Address: "fd00::2"},
		{PodName: "web-1"},
	}})
	if err != nil {
		t.Fatalf("a report of real Pods: %v", err)
	}
	if n := env.DB.Ent.Instance.Query().Where(instance.DeploymentID("web")).CountX(ctx); n != 3 {
		t.Errorf("%d instances stored, want the 3 reported", n)
	}
}

// A sentinel listed twice in one report is refused naming the second copy
// (it took the last one's status, which left the outcome to the list's
// order), and nothing of the report is stored.
func TestASentinelListedTwiceInOneReportIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	eu := env.Agent("eu")
	if _, err := env.Operator("alice").PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "gw", WorkspaceId: "ws",
		EnvironmentId: "prod", Region: "eu", Image: "gw:1", Replicas: 3, CpuMillicores: 1, MemoryMib: 1}); err != nil {
		t.Fatal(err)
	}
	healthy, unhealthy := ctrlv1.SentinelHealth_SENTINEL_HEALTH_HEALTHY, ctrlv1.SentinelHealth_SENTINEL_HEALTH_UNHEALTHY
	_, err := eu.ReportSentinelStatus(ctx, &ctrlv1.ReportSentinelStatusRequest{Region: "eu", Sentinels: []*ctrlv1.SentinelStatus{
		{SentinelId: "gw", AvailableReplicas: 3, Health: healthy},
		{SentinelId: "gw", AvailableReplicas: 0, Health: unhealthy},
	}})
	wantInvalid(t, "a sentinel listed twice", err, "sentinels[1].sentinel_id")
	if s := env.DB.Ent.Sentinel.GetX(ctx, "gw"); s.AvailableReplicas != 0 || s.Health != "unknown" {
		t.Errorf("the refused report changed the sentinel: %d available, %s", s.AvailableReplicas, s.Health)
	}
}

// An agent's identity is its Pod or host name: control and format
// characters, and spaces, are no name's, and a heartbeat or stream naming
// one is refused with no record written. So is an agent_version with
// control characters. A host name's upper case is taken.
func TestAgentIdentitiesAndVersionsWithControlCharactersAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	for _, identity := range []string{"krane\x1b[2J", "krane\x00", "krane 0", "krane\u202e0", "krane\u0085"} {
		wantInvalid(t, fmt.Sprintf("heartbeat of %q", identity), heartbeat(agent, "eu", identity), "agent_identity")
		wantInvalid(t, fmt.Sprintf("stream of %q", identity), watch(t, agent, "eu", identity), "agent_identity")
	}
	_, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0", AgentVersion: "v1\x1b[31m"})
	wantInvalid(t, "agent_version with an escape", err, "agent_version")
	if n := env.DB.Ent.Agent.Query().CountX(ctx); n != 0 {
		t.Errorf("refused heartbeats and streams left %d agent records", n)
	}
	if err := heartbeat(agent, "eu", "Build-Host.local"); err != nil {
		t.Errorf("heartbeat of a host name with upper case: %v", err)
	}
	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "krane-0", AgentVersion: "v1.2.3 (abc123)"}); err != nil {
		t.Errorf("heartbeat with a version with a space: %v", err)
	}
}

// An instance's spec hash, reason and restarts are what an agent read from
// its Pod: a label value, Kubernetes' words for why it is not ready (at
// most 64 bytes of printable text), a count. Anything else is refused
// naming the field, with nothing stored; what real Pods have is stored as
// reported, and a later report replaces it.
func TestInstanceHashesReasonsAndRestartsAreCheckedAndStored(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	deploy(t, op, "api", "eu")
	deploy(t, op, "web", "eu")
	good := &ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: []*ctrlv1.Instance{{PodName: "api-0", SpecHash: "abc", Reason: "CrashLoopBackOff", Restarts: 2}}}
	for _, c := range []struct {
		what, field string
		in          *ctrlv1.Instance
	}{
		{"negative", "restarts", &ctrlv1.Instance{PodName: "web-0", Restarts: -1}},
		{"over 63 characters", "spec_hash", &ctrlv1.Instance{PodName: "web-0", SpecHash: strings.Repeat("a", 64)}},
		{"a space", "spec_hash", &ctrlv1.Instance{PodName: "web-0", SpecHash: "a b"}},
		{"escape sequences", "spec_hash", &ctrlv1.Instance{PodName: "web-0", SpecHash: "\x1b[2J"}},
		{"over 64 bytes", "reason", &ctrlv1.Instance{PodName: "web-0", Reason: strings.Repeat("x", 65)}},
		{"escape sequences", "reason", &ctrlv1.Instance{PodName: "web-0", Reason: "Crash\x1b[2J"}},
		{"a bidi override", "reason", &ctrlv1.Instance{PodName: "web-0", Reason: "OOMKilled\u202e"}},
	} {
		err := report(agent, good, &ctrlv1.DeploymentStatus{DeploymentId: "web",
			Instances: []*ctrlv1.Instance{{PodName: "web-9"}, c.in}})
		wantInvalid(t, c.field+" with "+c.what, err, "deployments[1].instances[1]."+c.field)
	}
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 0 {
		t.Errorf("refused reports stored %d instances", n)
	}

	if err := report(agent, good, &ctrlv1.DeploymentStatus{DeploymentId: "web", Instances: []*ctrlv1.Instance{
		{PodName: "web-0", SpecHash: strings.Repeat("f", 63), Reason: strings.Repeat("é", 32), Restarts: math.MaxInt32},
		{PodName: "web-1", SpecHash: "rev-2.b_c", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true},
	}}); err != nil {
		t.Fatalf("a report of real Pods: %v", err)
	}
	got := env.DB.Ent.Instance.Query().Where(instance.PodName("api-0")).OnlyX(ctx)
	if got.SpecHash != "abc" || got.Reason != "CrashLoopBackOff" || got.Restarts != 2 {
		t.Errorf("api-0 stored as hash %q, reason %q, restarts %d", got.SpecHash, got.Reason, got.Restarts)
	}
	got = env.DB.Ent.Instance.Query().Where(instance.PodName("web-0")).OnlyX(ctx)
	if got.SpecHash != strings.Repeat("f", 63) || got.Reason != strings.Repeat("é", 32) || got.Restarts != math.MaxInt32 {
		t.Errorf("web-0 stored as hash %q, reason %q, restarts %d", got.SpecHash, got.Reason, got.Restarts)
	}

	// The next report replaces them: ready now, no reason.
	if err := report(agent, &ctrlv1.DeploymentStatus{DeploymentId: "api", Instances: []*ctrlv1.Instance{
		{PodName: "api-0", SpecHash: "def", Restarts: 3, Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true}}}); err != nil {
		t.Fatal(err)
	}
	got = env.DB.Ent.Instance.Query().Where(instance.PodName("api-0")).OnlyX(ctx)
	if got.SpecHash != "def" || got.Reason != "" || got.Restarts != 3 {
		t.Errorf("api-0 after the next report: hash %q, reason %q, restarts %d", got.SpecHash, got.Reason, got.Restarts)
	}
}
