package desired_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/auditlog"
	"github.com/deploysync/deploysync/ent/rollout"
)

// update gives deployment id image under canaryThenRest, failing the test
// on an error.
func update(t *testing.T, ctx context.Context, s *desired.Store, id, image string) {
	t.Helper()
	if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), id, desired.SpecUpdate{Image: &image}); err != nil {
		t.Fatal(err)
	}
}

// A halt pauses every rollout progressing in its scope and holds new
// ones queued; lifting it resumes exactly what it paused, and a
// rollout an operator paused stays paused.
func TestAHaltPausesWhatIsInFlightAndItsResumeExactlyThat(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithActor(context.Background(), "alice")
	all := []string{"ap-south", "eu-west", "us-east"}
	for _, id := range []string{"api", "web", "jobs"} {
		if err := s.Deploy(ctx, spec(id), all, 1); err != nil {
			t.Fatal(err)
		}
		update(t, ctx, s, id, "ghcr.io/acme/"+id+":v2")
	}
	if _, err := s.ControlRollout(ctx, "jobs", desired.RolloutPause); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Halt(ctx, fleet.Scope{}, ""); !errors.Is(err, desired.ErrInvalid) || !strings.HasPrefix(err.Error(), "reason:") {
		t.Fatalf("a halt without a reason: %v, want reason: invalid", err)
	}
	if _, _, err := s.Halt(ctx, fleet.Scope{Region: "eu-wset"}, "incident"); !errors.Is(err, desired.ErrUnknownRegion) {
		t.Fatalf("a halt of a region no one registered: %v, want ErrUnknownRegion", err)
	}
	h, paused, err := s.Halt(ctx, fleet.Scope{}, "incident 4711")
	if err != nil {
		t.Fatal(err)
	}
	if paused != 2 {
		t.Fatalf("paused %d, want 2 (api and web; jobs was paused already)", paused)
	}
	for _, id := range []string{"api", "web"} {
		r := inFlight(t, client, id)
		if r.State != rollout.StatePaused || r.HaltID == nil || *r.HaltID != h.ID || !strings.Contains(r.Reason, "halt #") {
			t.Fatalf("%s: %s, halt %v, %q", id, r.State, r.HaltID, r.Reason)
		}
		// A driver's step read before the halt does not land.
		if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version - 1, Regions: r.Regions, Advance: true}); !errors.Is(err, desired.ErrConcurrentChange) {
			t.Fatalf("%s: a step read before the halt: %v, want ErrConcurrentChange", id, err)
		}
		// Nor does an operator's resume or promote of it.
		if _, err := s.ControlRollout(ctx, id, desired.RolloutResume); !errors.Is(err, desired.ErrHeld) {
			t.Fatalf("%s: resume under the halt: %v, want ErrHeld", id, err)
		}
	}

	// A rollout made during the halt waits, queued, its canary untouched;
	// an immediate change is refused.
	if err := s.Deploy(ctx, spec("cron"), all, 1); !errors.Is(err, desired.ErrHeld) {
		t.Fatalf("an immediate deploy under a halt: %v, want ErrHeld", err)
	}
	if err := s.Deploy(desired.WithStrategy(ctx, canaryThenRest), spec("cron"), all, 1); err != nil {
		t.Fatal(err)
	}
	if r := inFlight(t, client, "cron"); r.State != rollout.StateQueued {
		t.Fatalf("cron's rollout: %s, want queued", r.State)
	}
	if got := images(t, client, "cron"); got["eu-west"] != "" {
		t.Fatalf("a queued deploy's canary runs %q, want nothing", got["eu-west"])
	}

	resumed, held, err := s.Resume(ctx, h.ID)
	if err != nil || resumed != 2 || held != 0 {
		t.Fatalf("resume: %d resumed, %d held, %v; want 2, 0", resumed, held, err)
	}
	for id, want := range map[string]rollout.State{"api": rollout.StateProgressing, "web": rollout.StateProgressing, "jobs": rollout.StatePaused, "cron": rollout.StateQueued} {
		if r := inFlight(t, client, id); r.State != want || r.HaltID != nil {
			t.Errorf("%s after the resume: %s (halt %v), want %s", id, r.State, r.HaltID, want)
		}
	}
	if _, _, err := s.Resume(ctx, h.ID); !errors.Is(err, desired.ErrConflict) {
		t.Fatalf("a second resume: %v, want ErrConflict", err)
	}
	// The queued one starts at the driver's next look.
	r := inFlight(t, client, "cron")
	if err := s.StartRollout(ctx, r.ID, r.Version); err != nil {
		t.Fatal(err)
	}
	if got := images(t, client, "cron"); got["eu-west"] != "ghcr.io/acme/api:v1" || got["us-east"] != "" {
		t.Fatalf("after its start: %v, want the canary only", got)
	}
}

// Two halts: resuming one leaves what the other covers paused, under it.
func TestOverlappingHalts(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	update(t, ctx, s, "api", "ghcr.io/acme/api:v2")
	everything, _, err := s.Halt(ctx, fleet.Scope{}, "incident")
	if err != nil {
		t.Fatal(err)
	}
	region, paused, err := s.Halt(ctx, fleet.Scope{Region: "us-east"}, "us-east is degraded")
	if err != nil || paused != 0 {
		t.Fatalf("second halt: paused %d, %v; want 0 (paused already)", paused, err)
	}
	resumed, held, err := s.Resume(ctx, everything.ID)
	if err != nil || resumed != 0 || held != 1 {
		t.Fatalf("resume: %d resumed, %d held, %v; want 0, 1", resumed, held, err)
	}
	if r := inFlight(t, client, "api"); r.State != rollout.StatePaused || r.HaltID == nil || *r.HaltID != region.ID {
		t.Fatalf("api: %s under halt %v, want paused under %d", r.State, r.HaltID, region.ID)
	}
}

// A closed freeze window holds the next wave, and a break-glass takes
// one deployment through, audited.
func TestAFreezeHoldsTheNextWaveAndABreakGlassTakesOneThrough(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithActor(context.Background(), "alice")
	all := []string{"ap-south", "eu-west", "us-east"}
	for _, id := range []string{"api", "web"} {
		if err := s.Deploy(ctx, spec(id), all, 1); err != nil {
			t.Fatal(err)
		}
		update(t, ctx, s, id, "ghcr.io/acme/"+id+":v2")
	}
	now := dbNow(t, client)
	w := fleet.Window{Name: "change-freeze", WorkspaceID: "ws1", EnvironmentID: "prod", StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour)}
	if _, err := s.SetFreezeWindow(ctx, fleet.Window{Name: "bad", Schedule: "0 17 * * *", Duration: time.Hour}, "Mars/Olympus", ""); err == nil || !strings.HasPrefix(err.Error(), "time_zone:") {
		t.Fatalf("an unknown time zone: %v, want time_zone: ...", err)
	}
	if _, err := s.SetFreezeWindow(ctx, w, "Europe/Berlin", "peak week"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"api", "web"} {
		r := inFlight(t, client, id)
		err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true})
		if !errors.Is(err, desired.ErrConcurrentChange) || !strings.Contains(err.Error(), "frozen until") {
			t.Fatalf("%s: a wave's start in a freeze: %v, want it held, frozen until ...", id, err)
		}
		if _, err := s.ControlRollout(ctx, id, desired.RolloutPromote); !errors.Is(err, desired.ErrHeld) {
			t.Fatalf("%s: a promote in a freeze: %v, want ErrHeld", id, err)
		}
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutBreakGlass); !errors.Is(err, desired.ErrInvalid) {
		t.Fatalf("a break-glass without a reason: %v, want ErrInvalid", err)
	}
	if _, err := s.ControlRollout(desired.WithBreakGlass(ctx, "the fix for incident 4711"), "api", desired.RolloutBreakGlass); err != nil {
		t.Fatal(err)
	}
	r := inFlight(t, client, "api")
	if r.BreakGlassBy != "alice" || r.BreakGlassReason != "the fix for incident 4711" {
		t.Fatalf("break glass by %q for %q", r.BreakGlassBy, r.BreakGlassReason)
	}
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}); err != nil {
		t.Fatalf("the broken-glass rollout's next wave: %v", err)
	}
	if got := images(t, client, "api"); got["us-east"] != "ghcr.io/acme/api:v2" {
		t.Fatalf("after the break-glass: %v, want every region on v2", got)
	}
	if got := images(t, client, "web"); got["us-east"] != "ghcr.io/acme/api:v1" {
		t.Fatalf("web: %v, want us-east still on v1 (frozen)", got)
	}
	// Scale stays immediate in a freeze.
	if err := s.Scale(ctx, "web", "us-east", 3); err != nil {
		t.Fatalf("scale in a freeze: %v", err)
	}
	if err := s.DeleteFreezeWindow(ctx, "change-freeze"); err != nil {
		t.Fatal(err)
	}
	r = inFlight(t, client, "web")
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}); err != nil {
		t.Fatalf("after the window went: %v", err)
	}
}

// Pacing: at most one rollout in flight in ws1/prod; the second waits,
// queued, and starts when the first ends.
func TestPacingQueuesTheSecondRollout(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	all := []string{"eu-west", "us-east"}
	for _, id := range []string{"api", "web"} {
		if err := s.Deploy(ctx, spec(id), all, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPacingBound(ctx, fleet.Scope{WorkspaceID: "ws1", EnvironmentID: "prod"}, 0, false); !errors.Is(err, desired.ErrInvalid) || !strings.HasPrefix(err.Error(), "max:") {
		t.Fatalf("a bound of 0: %v, want max: invalid", err)
	}
	if err := s.SetPacingBound(ctx, fleet.Scope{WorkspaceID: "ws1", EnvironmentID: "prod"}, 1, false); err != nil {
		t.Fatal(err)
	}
	update(t, ctx, s, "api", "ghcr.io/acme/api:v2")
	update(t, ctx, s, "web", "ghcr.io/acme/web:v2")
	if r := inFlight(t, client, "web"); r.State != rollout.StateQueued {
		t.Fatalf("web: %s, want queued behind api", r.State)
	}
	r := inFlight(t, client, "web")
	if err := s.StartRollout(ctx, r.ID, r.Version); !errors.Is(err, desired.ErrConcurrentChange) || !strings.Contains(err.Error(), "1st in line") {
		t.Fatalf("web's start while api is in flight: %v, want it held, 1st in line", err)
	}
	if _, err := s.ControlRollout(ctx, "api", desired.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRollout(ctx, r.ID, r.Version); err != nil {
		t.Fatalf("web's start once api ended: %v", err)
	}
}

// A spec a rollout rolled back for a failed gate is refused again unless
// retried on purpose, which is audited; its success removes the mark.
func TestAFailedSpecStaysFailed(t *testing.T) {
	s, client := setup(t)
	ctx := desired.WithActor(context.Background(), "alice")
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	update(t, ctx, s, "api", "ghcr.io/acme/api:bad")
	r := inFlight(t, client, "api")
	regions := r.Regions
	st := regions["eu-west"]
	st.State = desired.RegionFailed
	regions["eu-west"] = st
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: regions, Halt: true, Reason: "eu-west: 1 of 1 instances CrashLoopBackOff"}); err != nil {
		t.Fatal(err)
	}
	bad := "ghcr.io/acme/api:bad"
	_, err := s.UpdateDeployment(desired.WithStrategy(ctx, canaryThenRest), "api", desired.SpecUpdate{Image: &bad})
	if !errors.Is(err, desired.ErrFailedSpec) || !strings.Contains(err.Error(), "CrashLoopBackOff") || !strings.Contains(err.Error(), "--retry-failed") {
		t.Fatalf("the failed spec again: %v, want ErrFailedSpec with the evidence", err)
	}
	if _, _, err := s.Rollback(desired.WithStrategy(ctx, canaryThenRest), "api", 2); !errors.Is(err, desired.ErrFailedSpec) {
		t.Fatalf("a rollback to the failed revision: %v, want ErrFailedSpec", err)
	}
	retry := desired.WithRetryFailed(desired.WithStrategy(ctx, canaryThenRest), "fixed the config map it reads")
	if _, err := s.UpdateDeployment(retry, "api", desired.SpecUpdate{Image: &bad}); err != nil {
		t.Fatalf("a retry on purpose: %v", err)
	}
	n, err := client.AuditLog.Query().Where(auditlog.Action("rollout.retry_failed"), auditlog.DetailContains("fixed the config map")).Count(ctx)
	if err != nil || n != 1 {
		t.Fatalf("retry audit rows: %d, %v; want 1", n, err)
	}
	r = inFlight(t, client, "api")
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}); err != nil {
		t.Fatal(err)
	}
	r = inFlight(t, client, "api")
	if err := s.StepRollout(ctx, desired.RolloutStep{ID: r.ID, Version: r.Version, Regions: r.Regions, Advance: true}); err != nil {
		t.Fatal(err)
	}
	if n, err := client.FailedSpec.Query().Count(ctx); err != nil || n != 0 {
		t.Fatalf("failed marks after its success: %d, %v; want 0", n, err)
	}
}

func dbNow(t *testing.T, client *ent.Client) time.Time {
	t.Helper()
	var now time.Time
	err := store.WithTx(context.Background(), client, func(tx *ent.Tx) (err error) {
		now, err = store.Now(context.Background(), tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// A halt of a region holds an immediate change of a deployment there: it
// would reach that region now.
func TestARegionHaltHoldsAnImmediateChangeThere(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Deploy(ctx, spec("web"), []string{"ap-south"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Halt(ctx, fleet.Scope{Region: "us-east"}, "us-east is degraded"); err != nil {
		t.Fatal(err)
	}
	v2 := "ghcr.io/acme/api:v2"
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &v2}); !errors.Is(err, desired.ErrHeld) {
		t.Fatalf("an immediate update reaching us-east: %v, want ErrHeld", err)
	}
	if _, err := s.UpdateDeployment(ctx, "web", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatalf("an immediate update of a deployment not in us-east: %v", err)
	}
	if _, err := s.UpdateDeployment(desired.WithBreakGlass(ctx, "the fix"), "api", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatalf("the same update, breaking glass: %v", err)
	}
}

// A store whose window clock runs ahead judges a recurring window at its
// own time: a window firing two hours from now is closed for it, and open
// for a store on the database's clock. Bakes keep the database's clock.
func TestTheWindowClockMovesOnlyTheWindows(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	if err := s.Deploy(ctx, spec("api"), []string{"eu-west", "us-east"}, 1); err != nil {
		t.Fatal(err)
	}
	fires := dbNow(t, client).Add(2 * time.Hour).UTC()
	w := fleet.Window{Name: "later", Schedule: fmt.Sprintf("%d %d * * *", fires.Minute(), fires.Hour()), Duration: time.Hour}
	if _, err := s.SetFreezeWindow(ctx, w, "UTC", ""); err != nil {
		t.Fatal(err)
	}
	ahead := desired.New(client, desired.WithWindowClock(2*time.Hour+30*time.Minute))
	v2 := "ghcr.io/acme/api:v2"
	if _, err := ahead.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &v2}); !errors.Is(err, desired.ErrHeld) || !strings.Contains(err.Error(), "by window later") {
		t.Fatalf("an immediate update, judged 2h30m ahead: %v, want held by the window", err)
	}
	if _, err := s.UpdateDeployment(ctx, "api", desired.SpecUpdate{Image: &v2}); err != nil {
		t.Fatalf("the same update on the database's clock: %v", err)
	}
}
