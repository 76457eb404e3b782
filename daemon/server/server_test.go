package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testcerts"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func code(err error) codes.Code { return status.Code(err) }

// Tokens: each agent token is bound to its region, operator and agent
// tokens open only their own service, and missing or revoked tokens get
// nowhere.
func TestTokensBindCallersToTheirRegionAndService(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	euToken := env.AgentToken("eu")
	env.AgentToken("us")
	opToken := env.OperatorToken("alice")
	eu := ctrlv1.NewClusterServiceClient(env.Dial(euToken))

	watch := func(c ctrlv1.ClusterServiceClient, region string) error {
		s, err := c.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: "a"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	cases := map[string]struct {
		err  error
		want codes.Code
	}{
		"eu token watching us": {watch(eu, "us"), codes.PermissionDenied},
		"eu token reporting for us": {func() error {
			_, err := eu.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "us", AgentIdentity: "a"})
			return err
		}(), codes.PermissionDenied},
		"no token":                              {watch(ctrlv1.NewClusterServiceClient(env.Dial("")), "eu"), codes.Unauthenticated},
		"made-up token":                         {watch(ctrlv1.NewClusterServiceClient(env.Dial("dsa_nope")), "eu"), codes.Unauthenticated},
		"operator token on the cluster service": {watch(ctrlv1.NewClusterServiceClient(env.Dial(opToken)), "eu"), codes.PermissionDenied},
		"agent token on the operator service": {func() error {
			_, err := ctrlv1.NewOperatorServiceClient(env.Dial(euToken)).ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
			return err
		}(), codes.PermissionDenied},
	}
	for name, c := range cases {
		if code(c.err) != c.want {
			t.Errorf("%s: got %v, want %s", name, c.err, c.want)
		}
	}
	if _, err := eu.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "a"}); err != nil {
		t.Errorf("eu token reporting for eu: %v", err)
	}
	liveCtx, cancelLive := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLive()
	live, err := eu.WatchDeploymentChanges(liveCtx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.Recv(); err != nil {
		t.Fatalf("eu token watching eu: %v", err)
	}
	if _, err := auth.Revoke(ctx, env.DB.Ent, apitoken.KindAgent, "agent-eu"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if err := watch(eu, "eu"); code(err) != codes.Unauthenticated {
		t.Errorf("revoked token: got %v", err)
	}
	// The stream that was already running ends too (within the recheck
	// interval), rather than delivering changes until it reconnects.
	for {
		if _, err = live.Recv(); err != nil {
			break
		}
	}
	if code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("running stream of a revoked token: got %v, want Unauthenticated (revoked)", err)
	}
	// Health and reflection need no token.
	hc := healthpb.NewHealthClient(env.Dial(""))
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v %v", r, err)
	}
}

// A stream for a region that is not registered (its row gone, as after a
// restore from an older backup, while the token lives on) is refused as
// invalid and leaves no agent record behind, however often it comes back,
// and whether or not its agent has a record; an agent of a registered
// region is admitted meanwhile.
func TestAStreamForAnUnregisteredRegionIsRefusedAndWritesNothing(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ghost := ctrlv1.NewClusterServiceClient(env.Dial(env.AgentToken("ghost-1")))
	eu := ctrlv1.NewClusterServiceClient(env.Dial(env.AgentToken("eu")))
	if _, err := env.DB.SQL.ExecContext(ctx, "DELETE FROM regions WHERE id = 'ghost-1'"); err != nil {
		t.Fatal(err)
	}
	watch := func(c ctrlv1.ClusterServiceClient, region string) error {
		s, err := c.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: "krane"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	for range 3 {
		if err := watch(ghost, "ghost-1"); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ghost-1") {
			t.Fatalf("stream for an unregistered region: got %v, want InvalidArgument naming it", err)
		}
	}
	if err := watch(eu, "eu"); err != nil {
		t.Fatalf("stream for eu: %v", err)
	}
	var records int
	if err := env.DB.SQL.QueryRowContext(ctx, "SELECT COUNT(*) FROM agents WHERE region = 'ghost-1'").Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 0 {
		t.Errorf("%d agent records in the unregistered region, want none", records)
	}

	// An agent that has a record is refused too, once its region is gone
	// (and ctrld has read the regions table since).
	if err := watch(eu, "eu"); err != nil {
		t.Fatalf("stream for eu: %v", err)
	}
	if _, err := env.DB.SQL.ExecContext(ctx, "DELETE FROM regions WHERE id = 'eu'"); err != nil {
		t.Fatal(err)
	}
	if err := env.Server.Tailer.RefreshControl(ctx); err != nil {
		t.Fatal(err)
	}
	if err := watch(eu, "eu"); code(err) != codes.InvalidArgument {
		t.Fatalf("stream of a known agent whose region is gone: got %v, want InvalidArgument", err)
	}
}

// Bad input comes back as InvalidArgument naming the field, and nothing is
// written; an oversize message is refused before it is read.
// Stopping ctrld ends running streams with Unavailable saying why, so
// agents reconnect (to another replica) and nobody reads it as a failure.
func TestShutdownEndsStreamsSayingSo(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	s, err := env.Agent("eu").WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	env.Server.Stop()
	for err == nil {
		_, err = s.Recv()
	}
	if code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("stream at shutdown ended with %v, want Unavailable saying ctrld is shutting down", err)
	}
}

// Long texts are clipped to their columns on a character boundary: an
// agent's last error with a multi-byte character across the limit is
// stored (clipping at a byte would make MariaDB refuse the heartbeat). The
// audit log's detail and error texts are clipped by the same function.
func TestLongTextsAreClippedWithoutSplittingCharacters(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	long := strings.Repeat("a", 2047) + strings.Repeat("€", 2000)
	_, err := env.Agent("eu").ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{
		Region: "eu", AgentIdentity: "a", LastError: long})
	if err != nil {
		t.Fatalf("heartbeat with a long multi-byte error: %v", err)
	}
	var stored string
	if err := env.DB.SQL.QueryRow("SELECT last_error FROM agents WHERE identity = 'a'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != strings.Repeat("a", 2047) {
		t.Errorf("stored last_error: %d bytes, want the 2047 whole characters before the limit", len(stored))
	}
}

func TestBadInputIsRejectedNamingTheField(t *testing.T) {
	env := servertest.Start(t, server.Config{MaxMessageBytes: 64 << 10})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("alice")
	agent := env.Agent("eu")
	good := func() *ctrlv1.DeployRequest {
		return &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod", Image: "app:1",
			CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}
	}
	deploy := func(mut func(*ctrlv1.DeployRequest)) error {
		r := good()
		mut(r)
		_, err := op.Deploy(ctx, r)
		return err
	}
	cases := []struct {
		field string
		err   error
	}{
		{"id", deploy(func(r *ctrlv1.DeployRequest) { r.DeploymentId = "" })},
		{"image", deploy(func(r *ctrlv1.DeployRequest) { r.Image = "no good" })},
		{"replicas", deploy(func(r *ctrlv1.DeployRequest) { r.Replicas = 1001 })},
		{"replicas", deploy(func(r *ctrlv1.DeployRequest) { r.Replicas = -1 })},
		{"cpu_millicores", deploy(func(r *ctrlv1.DeployRequest) { r.CpuMillicores = 0 })},
		{"memory_mib", deploy(func(r *ctrlv1.DeployRequest) { r.MemoryMib = 0 })},
		{"region", deploy(func(r *ctrlv1.DeployRequest) { r.Regions = []string{"mars"} })},
		{"region", deploy(func(r *ctrlv1.DeployRequest) { r.Regions = []string{"Not_A_Region"} })},
		{"regions", deploy(func(r *ctrlv1.DeployRequest) { r.Regions = nil })},
		{"workspace_id", deploy(func(r *ctrlv1.DeployRequest) { r.WorkspaceId = "" })},
		{"status", func() error {
			_, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu"})
			return err
		}()},
		{"replicas", func() error {
			_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "eu", Replicas: 5000})
			return err
		}()},
		{"deployment_id", func() error {
			_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "Bad ID", Replicas: 1})
			return err
		}()},
		{"region", func() error {
			_, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "nowhere"})
			return err
		}()},
		{"image", func() error {
			_, err := op.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{SentinelId: "s", WorkspaceId: "ws", EnvironmentId: "prod",
				Region: "eu", Image: "BAD", Replicas: 1, CpuMillicores: 1, MemoryMib: 1})
			return err
		}()},
		{"spec", func() error {
			_, err := op.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{PolicyId: "p", WorkspaceId: "ws",
				EnvironmentId: "prod", Region: "eu", Name: "allow", Spec: &structpb.Struct{}})
			return err
		}()},
		{"region", func() error {
			s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "", AgentIdentity: "a"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}()},
		{"agent_identity", func() error {
			s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}()},
		{"pod_name", func() error {
			_, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu",
				Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "api", Instances: []*ctrlv1.Instance{{}}}}})
			return err
		}()},
	}
	for i, c := range cases {
		if code(c.err) != codes.InvalidArgument {
			t.Errorf("case %d (%s): got %v, want InvalidArgument", i, c.field, c.err)
			continue
		}
		if !strings.Contains(status.Convert(c.err).Message(), c.field) {
			t.Errorf("case %d: message %q does not name %q", i, status.Convert(c.err).Message(), c.field)
		}
	}
	huge := good()
	huge.Env = map[string]string{"BIG": strings.Repeat("x", 100<<10)}
	if _, err := op.Deploy(ctx, huge); code(err) != codes.ResourceExhausted {
		t.Errorf("oversize deploy: got %v, want ResourceExhausted", err)
	}
	if n := env.DB.Ent.Deployment.Query().CountX(ctx) + env.DB.Ent.Sentinel.Query().CountX(ctx) +
		env.DB.Ent.CiliumNetworkPolicy.Query().CountX(ctx); n != 0 {
		t.Errorf("rejected requests wrote %d rows", n)
	}
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != 0 {
		t.Errorf("rejected requests wrote %d change rows", n)
	}
}

// Every operator action lands in the audit log with who did it, what, and
// how it ended.
func TestOperatorActionsAreAudited(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("carol")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu",
		Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "ghost", Region: "eu", Replicas: 2})
	logs := env.DB.Ent.AuditLog.Query().Order(auditlog.ByID()).AllX(ctx)
	if len(logs) != 3 {
		t.Fatalf("want 3 audit records, got %d", len(logs))
	}
	for i, want := range []struct{ action, target string }{{"deploy", "api"}, {"stop", "api@eu"}, {"scale", "ghost@eu"}} {
		l := logs[i]
		if l.Actor != "carol" || l.Action != want.action || l.Target != want.target {
			t.Errorf("record %d: %+v", i, l)
		}
	}
	if logs[2].Error == "" || logs[0].Error != "" {
		t.Errorf("outcomes not recorded: %q / %q", logs[0].Error, logs[2].Error)
	}
}

// Status intake replaces a deployment's instances per report without
// writing change rows; the deploy workflow turns ready once every region
// reports enough running instances.
func TestStatusReportsDriveInstancesAndWorkflow(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	eu, us := env.Agent("eu"), env.Agent("us")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu", "us"}, Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	changes := env.DB.Ent.DeploymentChange.Query().CountX(ctx)
	running := func(names ...string) []*ctrlv1.Instance {
		var out []*ctrlv1.Instance
		for i, n := range names {
			out = append(out, &ctrlv1.Instance{PodName: n, Address: fmt.Sprintf("10.0.0.%d", i+1), Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING, Ready: true})
		}
		return out
	}
	report := func(c ctrlv1.ClusterServiceClient, region string, inst []*ctrlv1.Instance) {
		t.Helper()
		_, err := c.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: region,
			Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: "api", Instances: inst}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	workflow := func() string {
		return string(env.DB.Ent.Deployment.GetX(ctx, "api").WorkflowStatus)
	}
	report(eu, "eu", running("api-0", "api-1", "api-2"))
	report(eu, "eu", running("api-0", "api-1")) // api-2 is gone
	if n := env.DB.Ent.Instance.Query().CountX(ctx); n != 2 {
		t.Fatalf("want 2 instances after the second report, got %d", n)
	}
	eventually.True(t, 5*time.Second, "the workflow never turned deploying", func() bool { return workflow() == "deploying" })
	report(us, "us", running("api-0", "api-1"))
	eventually.True(t, 5*time.Second, "the workflow never turned ready", func() bool { return workflow() == "ready" })
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != changes {
		t.Fatalf("status reports wrote %d change rows", n-changes)
	}
	regions, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regions.Deployments[0].Regions {
		if r.ReadyInstances != 2 || r.ActualStatus != "running" {
			t.Errorf("region %s: %+v", r.DeploymentId, r)
		}
	}
}

// A deployment that never gets its instances fails after the timeout.
func TestWorkflowFailsOnTimeout(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	env.Config.Workflow.Timeout = 300 * time.Millisecond
	env.Restart()
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("alice")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the workflow never failed with the reason", func() bool {
		d := env.DB.Ent.Deployment.GetX(ctx, "api")
		return d.WorkflowStatus == "failed" && strings.Contains(d.WorkflowError, "eu 0/1 ready")
	})
}

// The regions view shows lag rising while no agent acks and falling when
// it catches up.
// The lag of several regions, computed in one query, stays each region's.
func TestRegionOverviewLagIsPerRegion(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	for id, regions := range map[string][]string{"a": {"eu"}, "b": {"eu"}, "c": {"eu", "us"}} {
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: regions, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	lag := map[string]int64{}
	for _, r := range regions.Regions {
		lag[r.Region] = r.LagChanges
	}
	if lag["eu"] != 3 || lag["us"] != 1 {
		t.Fatalf("lag per region %v, want eu 3 and us 1", lag)
	}
}

func TestRegionOverviewShowsLag(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	for _, id := range []string{"a", "b", "c"} {
		if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "ws", EnvironmentId: "prod",
			Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(regions.Regions) != 2 || regions.Regions[0].Region != "eu" {
		t.Fatalf("want eu (lagging) first: %+v", regions.Regions)
	}
	eu := regions.Regions[0]
	if eu.LagChanges != 3 || eu.PendingResources != 3 || eu.LagSeconds <= 0 || eu.AgentConnected {
		t.Fatalf("eu overview: %+v", eu)
	}
	pending, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: "eu"})
	if err != nil || pending.Total != 3 || len(pending.Changes) != 3 {
		t.Fatalf("pending: %+v %v", pending, err)
	}
	agent := env.Agent("eu")
	if _, err := agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: "eu", AgentIdentity: "k-0", AckedVersion: eu.HeadVersion}); err != nil {
		t.Fatal(err)
	}
	regions, _ = op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	for _, r := range regions.Regions {
		if r.Region == "eu" && (r.LagChanges != 0 || r.AckedVersion != eu.HeadVersion || r.AgentIdentity != "k-0") {
			t.Fatalf("after the ack: %+v", r)
		}
	}
}

// With --tls-cert/--tls-key ctrld speaks only TLS, and with --tls-client-ca
// it also requires a client certificate from that CA.
func TestMutualTLS(t *testing.T) {
	certs := testcerts.Write(t)
	env := servertest.Start(t, server.Config{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CA})
	token := env.OperatorToken("alice")
	ca, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	call := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(env.Server.Addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
			grpc.WithPerRPCCredentials(bearer.Credentials{Token: token}))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = ctrlv1.NewOperatorServiceClient(conn).ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		return err
	}
	client, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := call(&tls.Config{RootCAs: pool}); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	plain := ctrlv1.NewOperatorServiceClient(env.Dial(token))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := plain.ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); err == nil {
		t.Fatal("a plaintext client got in")
	}
}
