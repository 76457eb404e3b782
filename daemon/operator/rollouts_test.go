package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/auditlog"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// rolloutEnv is a real ctrld with deployment api (app:1) in ap, eu and us,
// deployed at once by dana (no strategy: revision 1 everywhere). No agent
// runs, so a promoted region never turns healthy: a rollout stays in its
// wave until an operator moves it (its deadline is minutes away).
func rolloutEnv(t *testing.T) (*servertest.Env, ctrlv1.OperatorServiceClient) {
	t.Helper()
	env := servertest.Start(t, server.Config{})
	for _, r := range []string{"ap", "eu", "us"} {
		env.AgentToken(r)
	}
	op := env.Operator("dana")
	req := deployRequest()
	req.Regions = []string{"ap", "eu", "us"}
	if _, err := op.Deploy(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return env, op
}

// canaryFirst is eu alone, baking a minute, then every other region.
func canaryFirst() *ctrlv1.RolloutStrategy {
	return &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"eu"}, Bake: durationpb.New(time.Minute)},
		{Regions: []string{"*"}, Bake: durationpb.New(2 * time.Minute), Deadline: durationpb.New(10 * time.Minute)},
	}}
}

// imagesByRegion is the image each region of api runs, as ListDeployments
// says: what agents are sent.
func imagesByRegion(t *testing.T, op ctrlv1.OperatorServiceClient) map[string]string {
	t.Helper()
	r, err := op.ListDeployments(context.Background(), &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, d := range r.Deployments {
		if d.DeploymentId == "api" {
			for _, in := range d.Regions {
				images[in.Region] = in.Image
			}
		}
	}
	return images
}

func wantImages(t *testing.T, op ctrlv1.OperatorServiceClient, when string, want map[string]string) {
	t.Helper()
	got := imagesByRegion(t, op)
	for region, image := range want {
		if got[region] != image {
			t.Errorf("%s: images by region %v, want %v", when, got, want)
			return
		}
	}
}

// An update with its own strategy gives the new image to the first wave
// only; GetRollout shows the waves, each region's state and what is next;
// a second update is refused while it is in flight; promote starts the
// next wave and abort returns every region to the image before, each
// audited under the operator's name.
func TestUpdateRollsOutWaveByWaveUnderTheOperatorsControl(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	wantImages(t, op, "after the update", map[string]string{"eu": "app:2", "ap": "app:1", "us": "app:1"})

	got, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	r := got.Rollout
	if r.State != "progressing" || r.Wave != 1 || r.Revision != 2 || r.FromRevision != 1 || r.FromImage != "app:1" ||
		r.ToImage != "app:2" || r.Actor != "dana" || r.FinishedAt != nil || len(r.Strategy.GetWaves()) != 2 || r.Strategy.OnFailure != "rollback" {
		t.Errorf("rollout: %v", r)
	}
	var regions []string
	for _, reg := range r.Regions {
		regions = append(regions, reg.Region+":"+reg.State)
		if reg.Region == "eu" && (reg.Wave != 1 || reg.PromotedAt == nil || reg.DeadlineLeft == nil || reg.BakeLeft != nil) {
			t.Errorf("eu, progressing: %v", reg)
		}
		if reg.Region != "eu" && (reg.Wave != 2 || reg.PromotedAt != nil) {
			t.Errorf("%s, waiting: %v", reg.Region, reg)
		}
	}
	if strings.Join(regions, " ") != "eu:progressing ap:waiting us:waiting" {
		t.Errorf("regions in wave order: %v", regions)
	}
	if !strings.HasPrefix(r.Next, "wave 2 (ap, us) once eu is healthy for 1m (deadline in ") {
		t.Errorf("next: %q", r.Next)
	}

	// One rollout at a time: the next update is refused, and changes
	// nothing.
	image3 := "app:3"
	_, err = op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image3})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rollout in flight") {
		t.Fatalf("an update during a rollout: got %v, want FailedPrecondition naming the rollout in flight", err)
	}
	wantImages(t, op, "after the refused update", map[string]string{"eu": "app:2", "ap": "app:1", "us": "app:1"})
	if d := env.DB.Ent.Deployment.GetX(ctx, "api"); d.Image != "app:2" {
		t.Errorf("the refused update wrote image %s", d.Image)
	}

	promoted, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE})
	if err != nil {
		t.Fatal(err)
	}
	if r := promoted.Rollout; r.State != "progressing" || r.Wave != 2 || r.Regions[0].State != "passed" || r.Regions[0].Why != "promoted by dana" ||
		r.Regions[1].State != "progressing" || r.Regions[2].State != "progressing" || !strings.HasPrefix(r.Next, "every region on revision 2 once ap, us are healthy for 2m") {
		t.Errorf("after promote: %v", r)
	}
	wantImages(t, op, "after promote", map[string]string{"eu": "app:2", "ap": "app:2", "us": "app:2"})

	aborted, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT})
	if err != nil {
		t.Fatal(err)
	}
	if r := aborted.Rollout; r.State != "rolled_back" || r.FinishedAt == nil || r.Reason != "aborted by dana" || r.Next != "nothing: rolled back; its regions run revision 1" {
		t.Errorf("after abort: %v", r)
	}
	wantImages(t, op, "after abort", map[string]string{"eu": "app:1", "ap": "app:1", "us": "app:1"})

	// Nothing is in flight now: the ended one is still what GetRollout
	// shows, and another action has nothing to act on.
	_, err = op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no rollout in flight") {
		t.Errorf("pause with nothing in flight: got %v, want FailedPrecondition", err)
	}
	if got, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"}); err != nil || got.Rollout.State != "rolled_back" {
		t.Errorf("GetRollout after the end: %v, %v", got, err)
	}
	list, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{})
	if err != nil || len(list.Rollouts) != 1 || list.Rollouts[0].State != "rolled_back" {
		t.Errorf("ListRollouts: %v, %v", list, err)
	}
	if list, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true}); err != nil || len(list.Rollouts) != 0 {
		t.Errorf("ListRollouts in flight only: %v, %v", list, err)
	}

	var actions []string
	for _, l := range env.DB.Ent.AuditLog.Query().Where(auditlog.ActionHasPrefix("rollout.")).Order(auditlog.ByID()).AllX(ctx) {
		actions = append(actions, l.Action+" "+l.Target+" "+l.Actor+" "+l.Error)
	}
	want := []string{"rollout.promote api dana ", "rollout.abort api dana ",
		"rollout.pause api dana deployment \"api\": no rollout in flight"}
	if strings.Join(actions, "|") != strings.Join(want, "|") {
		t.Errorf("audit records:\n%s\nwant\n%s", strings.Join(actions, "\n"), strings.Join(want, "\n"))
	}
}

// In flight first, then the newest: a finished rollout of a newer
// deployment comes after an older one still in flight.
func TestListRolloutsPutsThoseInFlightFirst(t *testing.T) {
	_, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	web := deployRequest()
	web.DeploymentId, web.Regions, web.Rollout = "web", []string{"ap", "eu"}, canaryFirst()
	if _, err := op.Deploy(ctx, web); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "web", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT}); err != nil {
		t.Fatal(err)
	}
	list, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list.Rollouts {
		got = append(got, r.DeploymentId+":"+r.State)
	}
	if strings.Join(got, " ") != "api:progressing web:rolled_back" {
		t.Errorf("ListRollouts: %v", got)
	}
	if r := list.Rollouts[1]; r.FromRevision != 0 || r.FromImage != "" || !strings.Contains(r.Next, "run nothing") {
		t.Errorf("a new deployment's aborted rollout: %v", r)
	}
	if list, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: 1}); err != nil || len(list.Rollouts) != 1 || list.Rollouts[0].DeploymentId != "api" {
		t.Errorf("ListRollouts limit 1: %v, %v", list, err)
	}
}

// An environment's strategy is what its deployments' updates roll out
// under; a call's own strategy wins, and one with no waves is immediate
// even where the environment has waves.
func TestEnvironmentStrategyAndPerCallOverride(t *testing.T) {
	_, op := rolloutEnv(t)
	ctx := context.Background()
	got, err := op.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod"})
	if err != nil || len(got.Strategy.GetWaves()) != 0 {
		t.Fatalf("before any is set: %v, %v; want no waves", got, err)
	}
	set, err := op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod",
		Strategy: &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"us"}}, {Regions: []string{"*"}, MaxFailures: 1}}, OnFailure: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	// Defaults filled in: a 10m deadline, no bake.
	if w := set.Strategy.GetWaves(); len(w) != 2 || w[0].Deadline.AsDuration() != 10*time.Minute || w[0].Bake.AsDuration() != 0 ||
		w[1].MaxFailures != 1 || set.Strategy.OnFailure != "pause" {
		t.Errorf("set: %v", set.Strategy)
	}
	got, err = op.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod"})
	if err != nil || got.Strategy.String() != set.Strategy.String() {
		t.Errorf("get: %v, %v; want %v", got, err, set.Strategy)
	}

	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image}); err != nil {
		t.Fatal(err)
	}
	wantImages(t, op, "under the environment's strategy", map[string]string{"us": "app:2", "ap": "app:1", "eu": "app:1"})
	if _, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT}); err != nil {
		t.Fatal(err)
	}

	// An empty strategy of the call's own: every region at once.
	if _, err := op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: "api", ToRevision: 2, Rollout: &ctrlv1.RolloutStrategy{}}); err != nil {
		t.Fatal(err)
	}
	wantImages(t, op, "after an immediate rollback", map[string]string{"us": "app:2", "ap": "app:2", "eu": "app:2"})
	if list, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true}); err != nil || len(list.Rollouts) != 0 {
		t.Errorf("an immediate rollback started a rollout: %v, %v", list, err)
	}
}

// Bad strategies are refused InvalidArgument naming the field, audited,
// and change nothing: no image, no rollout, no strategy.
// withChecks is a canary strategy with checks.
func withChecks(checks ...*ctrlv1.RolloutCheck) *ctrlv1.RolloutStrategy {
	return &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}}, {Regions: []string{"*"}}}, Checks: checks}
}

func TestBadStrategiesAreRefusedNamingTheField(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	wave := func(regions ...string) *ctrlv1.RolloutWave { return &ctrlv1.RolloutWave{Regions: regions} }
	for _, c := range []struct {
		name     string
		strategy *ctrlv1.RolloutStrategy
		field    string
	}{
		{"negative bake", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Bake: durationpb.New(-time.Second)}}}, "waves[0].bake"},
		{"fractional bake", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave("eu"), {Regions: []string{"*"}, Bake: durationpb.New(1500 * time.Millisecond)}}}, "waves[1].bake"},
		{"bake past int64 nanoseconds", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Bake: &durationpb.Duration{Seconds: 18446744074}}}}, "waves[0].bake"},
		{"zero deadline", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Deadline: durationpb.New(0)}}}, "waves[0].deadline"},
		{"invalid duration", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, Deadline: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}, "waves[0].deadline"},
		{"unknown on_failure", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave("eu")}, OnFailure: "explode"}, "on_failure"},
		{"region twice", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave("eu"), wave("us", "eu")}}, "waves[1].regions"},
		{"no region", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave()}}, "waves[0].regions"},
		{"bad region name", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave("EU")}}, "waves[0].regions"},
		{"every region may fail", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu"}, MaxFailures: 1}}}, "waves[0].max_failures"},
		// A typo of the canary eu: registered by no one, so refused, not
		// stored to match nothing at every rollout.
		{"a region no one registered", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{{Regions: []string{"ue"}, Bake: durationpb.New(30 * time.Second)}, wave("*")}}, "waves[0].regions"},
		{"on_failure without waves", &ctrlv1.RolloutStrategy{OnFailure: "pause"}, "on_failure"},
		{"max_failures past any deployment's regions", &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{wave("eu"), {Regions: []string{"*"}, MaxFailures: 2147483647}}}, "waves[1].max_failures"},
		// Checks: each query parsed with Prometheus' own parser.
		{"a check's query that does not parse", withChecks(&ctrlv1.RolloutCheck{Name: "errors", Kind: "metric", Query: "sum(rate(x[1m])", Bound: "< 0.01"}), "checks[0].query"},
		{"a check's unknown placeholder", withChecks(&ctrlv1.RolloutCheck{Name: "errors", Kind: "metric", Query: "x{pod={{pod}}}", Bound: "< 0.01"}), "checks[0].query"},
		{"a check's nonsense bound", withChecks(&ctrlv1.RolloutCheck{Name: "errors", Kind: "metric", Query: "x", Bound: "< lots"}), "checks[0].bound"},
		{"a check's interval", withChecks(&ctrlv1.RolloutCheck{Name: "errors", Kind: "metric", Query: "x", Bound: "< 1", Interval: durationpb.New(time.Hour)}), "checks[0].interval"},
		{"two checks of one name", withChecks(&ctrlv1.RolloutCheck{Name: "a", Kind: "alert"}, &ctrlv1.RolloutCheck{Name: "a", Kind: "alert"}), "checks[1].name"},
		{"checks without waves", &ctrlv1.RolloutStrategy{Checks: []*ctrlv1.RolloutCheck{{Name: "a", Kind: "alert"}}}, "checks"},
	} {
		image := "app:2"
		_, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: c.strategy})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "rollout."+c.field+":") {
			t.Errorf("update, %s: got %v, want InvalidArgument starting rollout.%s", c.name, err, c.field)
		}
		_, err = op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod", Strategy: c.strategy})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "strategy."+c.field+":") {
			t.Errorf("set strategy, %s: got %v, want InvalidArgument starting strategy.%s", c.name, err, c.field)
		}
	}
	_, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api"})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "action:") {
		t.Errorf("no action: got %v, want InvalidArgument naming action", err)
	}
	for _, c := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"GetRollout of a deployment that never had one", func() error {
			_, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
			return err
		}, codes.NotFound},
		{"GetRollout of no deployment", func() error {
			_, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "nope"})
			return err
		}, codes.NotFound},
		{"GetRollout of a bad ID", func() error {
			_, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "../x"})
			return err
		}, codes.InvalidArgument},
		{"ListRollouts over the limit", func() error {
			_, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: 501})
			return err
		}, codes.InvalidArgument},
		{"ControlRollout of no deployment", func() error {
			_, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "nope", Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE})
			return err
		}, codes.NotFound},
		{"GetRolloutStrategy of a bad workspace", func() error {
			_, err := op.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: "", EnvironmentId: "prod"})
			return err
		}, codes.InvalidArgument},
	} {
		if err := c.call(); status.Code(err) != c.code {
			t.Errorf("%s: got %v, want %s", c.name, err, c.code)
		}
	}
	wantImages(t, op, "after the refusals", map[string]string{"eu": "app:1", "ap": "app:1", "us": "app:1"})
	if n := env.DB.Ent.Rollout.Query().CountX(ctx); n != 0 {
		t.Errorf("refused calls left %d rollouts", n)
	}
	if n := env.DB.Ent.RolloutStrategy.Query().CountX(ctx); n != 0 {
		t.Errorf("refused calls left %d strategies", n)
	}
	if n := env.DB.Ent.DeploymentRevision.Query().CountX(ctx); n != 1 {
		t.Errorf("refused calls left %d revisions, want the deploy's alone", n)
	}
	// 19 updates, 19 strategies, the control without an action and the
	// one of no deployment, each on record with its error.
	if n := env.DB.Ent.AuditLog.Query().Where(auditlog.ErrorNEQ("")).CountX(ctx); n != 40 {
		t.Errorf("%d refused writes audited, want 40", n)
	}
}

// A read-only console key reads a rollout but cannot move it.
func TestReadOnlyKeyCannotControlARollout(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	image := "app:2"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canaryFirst()}); err != nil {
		t.Fatal(err)
	}
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bob := ctrlv1.NewOperatorServiceClient(conn)
	if _, err := bob.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"}); err != nil {
		t.Errorf("a read-only key's GetRollout: %v", err)
	}
	if _, err := bob.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{}); err != nil {
		t.Errorf("a read-only key's ListRollouts: %v", err)
	}
	if _, err := bob.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod"}); err != nil {
		t.Errorf("a read-only key's GetRolloutStrategy: %v", err)
	}
	for _, action := range []ctrlv1.RolloutAction{ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE, ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT} {
		_, err := bob.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: "api", Action: action})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("a read-only key's %s: got %v, want PermissionDenied", action, err)
		}
	}
	_, err = bob.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod", Strategy: canaryFirst()})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a read-only key's SetRolloutStrategy: got %v, want PermissionDenied", err)
	}
	r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
	if err != nil || r.Rollout.State != "progressing" || r.Rollout.Wave != 1 {
		t.Errorf("the rollout after the refused actions: %v, %v", r, err)
	}
	wantImages(t, op, "after the refused actions", map[string]string{"eu": "app:2", "ap": "app:1", "us": "app:1"})
}

// A wave naming none of a deployment's regions is never dropped: the
// update is refused, FailedPrecondition naming the wave, and nothing
// changes. Dropped, the canary's place would go to the next wave, and
// every region would get the change at once with no gate.
func TestAWaveMatchingNoneOfTheRegionsRefusesTheRollout(t *testing.T) {
	env, op := rolloutEnv(t)
	ctx := context.Background()
	env.AgentToken("sa") // registered, but api does not run there
	canaryElsewhere := &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"sa"}, Bake: durationpb.New(30 * time.Second)}, {Regions: []string{"*"}}}}
	if _, err := op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: "ws", EnvironmentId: "prod", Strategy: canaryElsewhere}); err != nil {
		t.Fatal(err)
	}
	image := "app:2"
	for name, req := range map[string]*ctrlv1.UpdateDeploymentRequest{
		"the environment's strategy": {DeploymentId: "api", Image: &image},
		"the call's own strategy":    {DeploymentId: "api", Image: &image, Rollout: canaryElsewhere},
	} {
		_, err := op.UpdateDeployment(ctx, req)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "wave 1 of its rollout strategy (sa) names none of its regions (ap, eu, us)") {
			t.Errorf("%s: got %v, want FailedPrecondition naming wave 1", name, err)
		}
	}
	wantImages(t, op, "after the refusals", map[string]string{"eu": "app:1", "ap": "app:1", "us": "app:1"})
	if n := env.DB.Ent.Rollout.Query().CountX(ctx); n != 0 {
		t.Errorf("refused updates left %d rollouts", n)
	}
}
