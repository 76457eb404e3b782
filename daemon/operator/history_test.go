package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

const envSecret = "hunter2-history-secret"

// historyEnv is a real ctrld with deployment api (app:1, 3 replicas) in
// eu and us, deployed, scaled in us to 4, updated to app:2 with a secret
// in FOO and stopped in eu, all by dana.
func historyEnv(t *testing.T) (*servertest.Env, ctrlv1.OperatorServiceClient) {
	t.Helper()
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("dana")
	image := "app:2"
	steps := []func() error{
		func() error {
			r := deployRequest()
			r.Regions, r.Replicas = []string{"eu", "us"}, 3
			_, err := op.Deploy(ctx, r)
			return err
		},
		func() error {
			_, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "us", Replicas: 4})
			return err
		},
		func() error {
			_, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image,
				Env: map[string]string{"FOO": envSecret}})
			return err
		},
		func() error {
			_, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "api", Region: "eu",
				Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED})
			return err
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return env, op
}

// The history says, newest first, what each action changed, who did it
// and which stream versions it wrote, and never an env value.
func TestHistorySaysWhatChangedAndWho(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()
	h, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: "api"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ action, summary string }{
		{"stop", "stopped in eu"},
		{"update", "image app:1 -> app:2; env FOO added"},
		{"scale", "replicas us 3 -> 4"},
		{"deploy", "created in eu, us"},
	}
	if len(h.Revisions) != len(want) {
		t.Fatalf("%d revisions, want %d", len(h.Revisions), len(want))
	}
	for i, r := range h.Revisions {
		if r.Revision != int32(len(want)-i) || r.Action != want[i].action || r.Summary != want[i].summary || r.Actor != "dana" ||
			r.FirstVersion == 0 || r.LastVersion < r.FirstVersion {
			t.Errorf("revision %d: %d %s %q by %q versions %d..%d; want %s %q by dana", i, r.Revision, r.Action, r.Summary, r.Actor,
				r.FirstVersion, r.LastVersion, want[i].action, want[i].summary)
		}
	}
	if got := h.Revisions[0].EnvNames; len(got) != 1 || got[0] != "FOO" {
		t.Errorf("env_names %v", got)
	}
	if b, _ := protojson.Marshal(h); strings.Contains(string(b), envSecret) {
		t.Errorf("history shows an env value: %s", b)
	}
	// The versions are the stream's rows of this deployment.
	scale := h.Revisions[2]
	rows := env.DB.Ent.DeploymentChange.Query().
		Where(deploymentchange.IDGTE(scale.FirstVersion), deploymentchange.IDLTE(scale.LastVersion)).AllX(ctx)
	if len(rows) != 1 || rows[0].ResourceID != "api" || rows[0].Region != "us" {
		t.Errorf("scale's versions %d..%d hold %v", scale.FirstVersion, scale.LastVersion, rows)
	}
	// A limit of 1 still says what the newest changed.
	h, err = op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: "api", Limit: 1})
	if err != nil || len(h.Revisions) != 1 || h.Revisions[0].Summary != "stopped in eu" {
		t.Fatalf("history with limit 1: %v, %v", h, err)
	}
}

// A rollback restores an earlier revision's image, env and replicas, and
// agents get a change for each region; start/stop stays as it is.
func TestRollbackRestoresWhatAgentsRun(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()

	// A deployment whose only other revision stopped it has nothing to
	// roll back (start and stop are not): refused, and nothing written.
	solo := deployRequest()
	solo.DeploymentId, solo.Regions, solo.Replicas = "solo", []string{"eu"}, 1
	if _, err := op.Deploy(ctx, solo); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: "solo", Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED}); err != nil {
		t.Fatal(err)
	}
	head := env.DB.Ent.DeploymentChange.Query().CountX(ctx)
	_, err := op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: "solo"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing to roll back") {
		t.Fatalf("rollback of a deployment only stopped since: got %v, want FailedPrecondition", err)
	}
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != head {
		t.Fatalf("a refused rollback wrote %d change rows", n-head)
	}

	// The default rollback restores the newest earlier spec that differs:
	// revision 4 only stopped eu, so revision 3's spec is the current one;
	// revision 2 (image app:1, no env, us at 4) is restored, and eu stays
	// stopped.
	r, err := op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: "api"})
	if err != nil || r.Revision != 5 || r.Restored != 2 {
		t.Fatalf("default rollback: %v, %v; want revision 5 restoring 2", r, err)
	}
	regions := func() string {
		t.Helper()
		deps, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		api := deps.Deployments[slices.IndexFunc(deps.Deployments, func(d *ctrlv1.DeploymentSummary) bool { return d.DeploymentId == "api" })]
		for _, in := range api.Regions {
			got = append(got, fmt.Sprintf("%s %s %s %d", in.Region, in.Image, in.DesiredStatus, in.Replicas))
		}
		return strings.Join(got, ",")
	}
	if got, want := regions(), "eu app:1 stopped 3,us app:1 running 4"; got != want {
		t.Errorf("after the default rollback: %q, want %q", got, want)
	}
	if d := env.DB.Ent.Deployment.GetX(ctx, "api"); len(d.Env) != 0 {
		t.Errorf("env after rollback %v", d.Env)
	}
	// What the agents are sent: a change for each region (the spec) and
	// only those, within the rollback's versions.
	rev := env.DB.Ent.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID("api"), deploymentrevision.Revision(5)).OnlyX(ctx)
	rows := env.DB.Ent.DeploymentChange.Query().Where(deploymentchange.IDGT(uint64(head))).AllX(ctx)
	byRegion := map[string]int{}
	for _, c := range rows {
		byRegion[c.Region]++
		if c.ID < rev.FirstVersion || c.ID > rev.LastVersion || c.ResourceID != "api" {
			t.Errorf("change %d (%s) outside the rollback's versions %d..%d", c.ID, c.ResourceID, rev.FirstVersion, rev.LastVersion)
		}
	}
	if byRegion["eu"] == 0 || byRegion["us"] == 0 {
		t.Errorf("rollback's change rows by region %v, want both", byRegion)
	}

	// An explicit revision: 1's replicas (us back to 3).
	r, err = op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: "api", ToRevision: 1})
	if err != nil || r.Revision != 6 || r.Restored != 1 {
		t.Fatalf("rollback to 1: %v, %v; want revision 6 restoring 1", r, err)
	}
	if got, want := regions(), "eu app:1 stopped 3,us app:1 running 3"; got != want {
		t.Errorf("after the rollback to 1: %q, want %q", got, want)
	}
	logs := auditLog(t, env)
	last := logs[len(logs)-1]
	if last.Action != "rollback" || last.Actor != "dana" || last.Target != "api" || last.Error != "" {
		t.Errorf("rollback's audit record %+v", last)
	}
	for _, l := range logs {
		if strings.Contains(l.Detail, envSecret) {
			t.Errorf("audit record of %s carries the env value: %s", l.Action, l.Detail)
		}
	}
}

// Bad input is refused with the code and the field it names, and changes
// nothing: no revision, no change row.
func TestHistoryCallsRefuseBadInput(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()
	image, badImage, zero, same := "app:3", "NOT AN IMAGE", int32(0), "app:2"
	changes := env.DB.Ent.DeploymentChange.Query().CountX(ctx)
	revisions := env.DB.Ent.DeploymentRevision.Query().CountX(ctx)
	update := func(r *ctrlv1.UpdateDeploymentRequest) error {
		if r.DeploymentId == "" {
			r.DeploymentId = "api"
		}
		_, err := op.UpdateDeployment(ctx, r)
		return err
	}
	rollback := func(id string, to int32) error {
		_, err := op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: id, ToRevision: to})
		return err
	}
	history := func(id string, limit int32) error {
		_, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: id, Limit: limit})
		return err
	}
	cases := []struct {
		name string
		err  error
		code codes.Code
		says string
	}{
		{"update with nothing set", update(&ctrlv1.UpdateDeploymentRequest{}), codes.InvalidArgument, "set at least one"},
		{"update to the same image", update(&ctrlv1.UpdateDeploymentRequest{Image: &same}), codes.InvalidArgument, "nothing to change"},
		{"update to a bad image", update(&ctrlv1.UpdateDeploymentRequest{Image: &badImage}), codes.InvalidArgument, "image"},
		{"update to 0 cpu", update(&ctrlv1.UpdateDeploymentRequest{CpuMillicores: &zero}), codes.InvalidArgument, "cpu_millicores"},
		{"update to 0 memory", update(&ctrlv1.UpdateDeploymentRequest{MemoryMib: &zero}), codes.InvalidArgument, "memory_mib"},
		{"update a bad env name", update(&ctrlv1.UpdateDeploymentRequest{Env: map[string]string{"1=": "x"}}), codes.InvalidArgument, "env"},
		{"update a bad deployment_id", update(&ctrlv1.UpdateDeploymentRequest{DeploymentId: "../x", Image: &image}), codes.InvalidArgument, "deployment_id"},
		{"update an unknown deployment", update(&ctrlv1.UpdateDeploymentRequest{DeploymentId: "nope", Image: &image}), codes.NotFound, "nope"},
		{"rollback to -1", rollback("api", -1), codes.InvalidArgument, "to_revision"},
		{"rollback to an unknown revision", rollback("api", 99), codes.NotFound, "revision 99"},
		{"rollback an unknown deployment", rollback("nope", 0), codes.NotFound, "nope"},
		{"rollback a bad deployment_id", rollback("", 0), codes.InvalidArgument, "deployment_id"},
		{"history limit -1", history("api", -1), codes.InvalidArgument, "limit"},
		{"history limit 501", history("api", 501), codes.InvalidArgument, "limit"},
		{"history of a bad deployment_id", history("A B", 0), codes.InvalidArgument, "deployment_id"},
		{"history of an unknown deployment", history("nope", 0), codes.NotFound, "nope"},
	}
	for _, c := range cases {
		if status.Code(c.err) != c.code || !strings.Contains(status.Convert(c.err).Message(), c.says) {
			t.Errorf("%s: got %v, want %s saying %q", c.name, clip(c.err), c.code, c.says)
		}
	}
	if n := env.DB.Ent.DeploymentChange.Query().CountX(ctx); n != changes {
		t.Errorf("refused calls wrote %d change rows", n-changes)
	}
	if n := env.DB.Ent.DeploymentRevision.Query().CountX(ctx); n != revisions {
		t.Errorf("refused calls wrote %d revisions", n-revisions)
	}
}

// Scales and rollbacks of one deployment at once: each succeeds, finds
// nothing to roll back, or is told to retry (Aborted), never Internal or
// Unavailable; revision numbers stay one per success.
func TestConcurrentScaleAndRollbackKeepRevisionsConsistent(t *testing.T) {
	env, op := historyEnv(t)
	ctx := context.Background()
	const workers = 8
	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "us", Replicas: int32(5 + i)})
			} else {
				_, err = op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: "api", ToRevision: 2})
			}
			codesSeen[i] = status.Code(err)
			if strings.Contains(status.Convert(err).Message(), desired.ErrConcurrentChange.Error()) {
				// The deployment's lock serializes revisions: a
				// revision number taken twice means it was lost.
				t.Errorf("worker %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	ok := 4 // historyEnv's actions
	for i, c := range codesSeen {
		switch c {
		case codes.OK:
			ok++
		case codes.FailedPrecondition, codes.Aborted:
		default:
			t.Errorf("worker %d: %s", i, c)
		}
	}
	revs := env.DB.Ent.DeploymentRevision.Query().Order(ent.Asc(deploymentrevision.FieldRevision)).AllX(ctx)
	if len(revs) != ok {
		t.Fatalf("%d revisions for %d successful actions", len(revs), ok)
	}
	for i, r := range revs {
		if r.Revision != i+1 || (i > 0 && r.FirstVersion <= revs[i-1].LastVersion) {
			t.Fatalf("revision %d: number %d, versions %d..%d after %d", i, r.Revision, r.FirstVersion, r.LastVersion, revs[max(i-1, 0)].LastVersion)
		}
	}
}
