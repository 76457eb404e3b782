package cmdline

import (
	"strings"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// errorJSON is a failed command's error document.
type errorJSON struct {
	Error struct{ Code, Message string } `json:"error"`
}

// rolloutState is the state of the deployment's rollout, as ctrld has it.
func (e *cliEnv) rolloutState(t *testing.T, id string) string {
	t.Helper()
	r, err := e.op.GetRollout(t.Context(), &ctrlv1.GetRolloutRequest{DeploymentId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetRollout().GetState()
}

func (e *cliEnv) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.run(args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// wantRefused runs args as JSON and wants them refused with code, the
// message naming words.
func (e *cliEnv) wantRefused(t *testing.T, code, words string, args ...string) {
	t.Helper()
	var doc errorJSON
	err := e.runJSON(t, &doc, args...)
	if err == nil || doc.Error.Code != code || !strings.Contains(doc.Error.Message, words) {
		t.Errorf("%v: %v, %+v; want %s naming %q", args, err, doc.Error, code, words)
	}
}

// A halt through the command line, against a real ctrld: refused without
// a scope or a reason; with them it pauses the environment's rollout in
// flight, which `rollout status` and `fleet status` say (by whom and
// why); a rollout started meanwhile waits, queued, saying so; resuming
// it by hand is refused naming the halt; `fleet resume` lifts it and
// both go on.
func TestFleetHaltAndResume(t *testing.T) {
	e := newCLIEnv(t) // api, app:1, in eu and us: revision 1
	e.must(t, "deploy", "web", "--image", "web:1", "--region", "eu", "--region", "us", "--workspace", "ws", "--environment", "prod")
	e.must(t, "update", "api", "--image", "app:2", "--wave", "eu bake=60s", "--wave", "*")

	e.wantRefused(t, "InvalidArgument", "say where", "fleet", "halt", "--reason", "incident 7")
	e.wantRefused(t, "InvalidArgument", "--reason", "fleet", "halt", "--everywhere")
	e.wantRefused(t, "InvalidArgument", "--reason", "fleet", "halt", "--everywhere", "--reason", "  ")
	e.wantRefused(t, "InvalidArgument", "give both", "fleet", "halt", "--workspace", "ws", "--reason", "incident 7")
	e.wantRefused(t, "InvalidArgument", "not several", "fleet", "halt", "--everywhere", "--region", "eu", "--reason", "incident 7")
	if n := e.env.DB.Ent.FleetHalt.Query().CountX(t.Context()); n != 0 {
		t.Fatalf("refused halts wrote %d", n)
	}

	out := e.must(t, "fleet", "halt", "--workspace", "ws", "--environment", "prod", "--reason", "incident 7")
	if want := "halted environment ws/prod: halt 1 paused 1 rollout; new waves there wait until it is lifted (unkey-tui fleet resume 1)\n"; out != want {
		t.Errorf("halt: %q, want %q", out, want)
	}
	if got := e.rolloutState(t, "api"); got != "paused" {
		t.Fatalf("api's rollout after the halt: %s, want paused", got)
	}
	out = e.must(t, "rollout", "status", "api")
	for _, want := range []string{"state: paused, wave 1 of 2", "reason: paused by halt #1 (ci-bot: incident 7)",
		"halt: 1 paused it; unkey-tui fleet resume 1 lifts it"} {
		if !strings.Contains(out, want) {
			t.Errorf("status of the halted rollout lacks %q:\n%s", want, out)
		}
	}

	// Made while the halt stands: it waits, and says why.
	if out := e.must(t, "update", "web", "--image", "web:2", "--wave", "eu bake=60s", "--wave", "*"); !strings.Contains(out, "queued, no region changed yet: halted by halt #1") {
		t.Errorf("the update made during the halt says %q; want it to say it is queued, and why", out)
	}
	if got := e.rolloutState(t, "web"); got != "queued" {
		t.Fatalf("web's rollout made during the halt: %s, want queued", got)
	}
	out = e.must(t, "fleet")
	for _, want := range []string{
		"1 ws/prod ci-bot", // the halt: id, scope, by, since, holding, reason
		"2 incident 7",
		"FREEZE WINDOWS none",
		"ROLLOUTS IN FLIGHT (2,",
		"ws/prod: 1 paused (1 by a halt), 1 queued",
		"ws/prod eu paused api 1/2 paused by halt #1 (ci-bot: incident 7)",
		"ws/prod eu queued web 1/2 halted by halt #1 (ci-bot: incident 7)",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("fleet status lacks %q:\n%s", want, out)
		}
	}
	var fleet struct {
		Halts []struct {
			ID      string `json:"id"`
			Reason  string `json:"reason"`
			Holding int    `json:"holding"`
		} `json:"halts"`
		Rollouts []struct {
			DeploymentID string `json:"deployment_id"`
			State        string `json:"state"`
			HaltID       string `json:"halt_id"`
			HeldKind     string `json:"held_kind"`
		} `json:"rollouts"`
	}
	if err := e.runJSON(t, &fleet, "fleet", "status"); err != nil || len(fleet.Halts) != 1 || fleet.Halts[0].ID != "1" ||
		fleet.Halts[0].Holding != 2 || len(fleet.Rollouts) != 2 || fleet.Rollouts[0].HaltID != "1" || fleet.Rollouts[1].HeldKind != "halt" {
		t.Errorf("fleet status as JSON: %v, %+v", err, fleet)
	}

	e.wantRefused(t, "FailedPrecondition", "halt", "rollout", "resume", "api")
	if got := e.rolloutState(t, "api"); got != "paused" {
		t.Fatalf("a refused resume moved the rollout: %s", got)
	}
	e.wantRefused(t, "InvalidArgument", "HALT_ID", "fleet", "resume", "one")
	e.wantRefused(t, "NotFound", "halt 9", "fleet", "resume", "9")

	if out := e.must(t, "fleet", "resume", "1"); out != "lifted halt 1: resumed 1 rollout\n" {
		t.Errorf("resume: %q", out)
	}
	if got := e.rolloutState(t, "api"); got != "progressing" {
		t.Errorf("api's rollout after the resume: %s, want progressing", got)
	}
	eventually.True(t, 10*time.Second, "the queued rollout starts once the halt is lifted", func() bool { return e.rolloutState(t, "web") == "progressing" })
	e.wantRefused(t, "FailedPrecondition", "lifted already", "fleet", "resume", "1")
	if n := e.env.DB.Ent.AuditLog.Query().CountX(t.Context()); n < 5 {
		t.Errorf("audit rows: %d", n)
	}
}

// Freeze windows through the command line: what cannot be read is refused
// naming the flag (here) or the field (ctrld), with nothing written; a
// closed window holds a new rollout queued, saying until when and by
// which window; break-glass without a reason is refused, with one it
// takes the rollout through, shown on it.
func TestFleetFreezeAndBreakGlass(t *testing.T) {
	e := newCLIEnv(t)
	set := func(args ...string) []string { return append([]string{"fleet", "freeze", "set"}, args...) }
	for _, c := range []struct {
		args        []string
		code, words string
	}{
		// ctrld reads the schedule and its zone, and names the field.
		{set("nights", "--schedule", "0 17 * * 1-5", "--duration", "16h", "--time-zone", "Mars/Olympus", "--everywhere"), "InvalidArgument", "time_zone"},
		{set("nights", "--schedule", "0 25 * * *", "--duration", "16h", "--everywhere"), "InvalidArgument", "schedule"},
		{set("nights", "--schedule", "0 17 * * *", "--duration", "10s", "--everywhere"), "InvalidArgument", "duration"},
		{set("Nights", "--schedule", "0 17 * * *", "--duration", "1h", "--everywhere"), "InvalidArgument", "name"},
		{set("once", "--from", "2026-12-27T00:00", "--until", "2026-12-24T00:00", "--everywhere"), "InvalidArgument", "ends_at"},
		// What unkey-tui must read itself, it refuses naming the flag.
		{set("once", "--from", "2026-12-24T00:00", "--until", "2026-12-27T00:00", "--time-zone", "Mars/Olympus", "--everywhere"), "InvalidArgument", "--time-zone"},
		{set("once", "--from", "24.12.2026", "--until", "2026-12-27T00:00", "--everywhere"), "InvalidArgument", "--from"},
		{set("once", "--from", "2026-12-24T00:00", "--everywhere"), "InvalidArgument", "--until"},
		{set("nights", "--schedule", "0 17 * * *", "--everywhere"), "InvalidArgument", "--duration"},
		{set("nights", "--schedule", "0 17 * * *", "--duration", "1h"), "InvalidArgument", "--everywhere"},
	} {
		e.wantRefused(t, c.code, c.words, c.args...)
	}
	if n := e.env.DB.Ent.FreezeWindow.Query().CountX(t.Context()); n != 0 {
		t.Fatalf("refused windows wrote %d", n)
	}

	berlin, _ := time.LoadLocation("Europe/Berlin")
	from, until := time.Now().Add(-time.Hour), time.Now().Add(3*time.Hour).In(berlin).Truncate(time.Minute)
	out := e.must(t, set("deploy-freeze", "--from", from.Format(time.RFC3339), "--until", until.Format("2006-01-02T15:04"),
		"--time-zone", "Europe/Berlin", "--workspace", "ws", "--environment", "prod", "--reason", "quarter end")...)
	closed := "CLOSED until " + until.Format("Mon 2 Jan 15:04 MST")
	if !strings.HasPrefix(out, "set freeze window deploy-freeze (ws/prod): ") || !strings.Contains(out, closed) {
		t.Errorf("set: %q, want it %s", out, closed)
	}

	// An immediate change has no rollout to wait in: refused, saying why.
	e.wantRefused(t, "FailedPrecondition", "deploy-freeze", "update", "api", "--image", "app:2", "--immediate")
	e.must(t, "update", "api", "--image", "app:2", "--wave", "eu bake=60s", "--wave", "*")
	out = e.must(t, "rollout", "status", "api")
	if want := "held: frozen until " + until.Format("Mon 15:04 MST") + " by window deploy-freeze"; e.rolloutState(t, "api") != "queued" || !strings.Contains(out, want) {
		t.Errorf("a rollout made while the window is closed: want it queued and %q:\n%s", want, out)
	}
	if out := e.must(t, "fleet", "status"); !strings.Contains(strings.Join(strings.Fields(out), " "), "deploy-freeze ws/prod") ||
		!strings.Contains(out, closed) || !strings.Contains(out, "quarter end") {
		t.Errorf("fleet status lacks the window:\n%s", out)
	}

	e.wantRefused(t, "InvalidArgument", "--reason", "rollout", "break-glass", "api")
	if got := e.rolloutState(t, "api"); got != "queued" {
		t.Fatalf("a refused break-glass moved the rollout: %s", got)
	}
	out = e.must(t, "rollout", "break-glass", "api", "--reason", "hotfix for incident 7")
	for _, want := range []string{"broke glass for the rollout of api", "state: progressing", "break-glass: by ci-bot: hotfix for incident 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("break-glass lacks %q:\n%s", want, out)
		}
	}
	e.wantRefused(t, "InvalidArgument", "--break-glass", "update", "api", "--image", "app:3", "--immediate", "--break-glass", "")

	out = e.must(t, "fleet", "freeze", "delete", "deploy-freeze")
	if out != "deleted freeze window deploy-freeze\n" {
		t.Errorf("delete: %q", out)
	}
	e.wantRefused(t, "NotFound", "deploy-freeze", "fleet", "freeze", "delete", "deploy-freeze")
}

// Pacing through the command line: a bound of a region lets one canary
// in it at a time; the next waits, queued, with its place; bad bounds are
// refused naming the flag.
func TestFleetPace(t *testing.T) {
	e := newCLIEnv(t)
	e.must(t, "deploy", "web", "--image", "web:1", "--region", "eu", "--region", "us", "--workspace", "ws", "--environment", "prod")
	e.wantRefused(t, "InvalidArgument", "--max", "fleet", "pace", "--region", "eu", "--max", "0")
	e.wantRefused(t, "InvalidArgument", "--max", "fleet", "pace", "--region", "eu")
	e.wantRefused(t, "InvalidArgument", "say where", "fleet", "pace", "--max", "1")
	e.wantRefused(t, "InvalidArgument", "region", "fleet", "pace", "--region", "mars", "--max", "1")
	if out := e.must(t, "fleet", "pace", "--region", "eu", "--max", "1"); out != "region eu: at most 1 first wave (canaries) in progress at once\n" {
		t.Errorf("pace: %q", out)
	}
	e.must(t, "update", "api", "--image", "app:2", "--wave", "eu bake=60s", "--wave", "*")
	e.must(t, "update", "web", "--image", "web:2", "--wave", "eu bake=60s", "--wave", "*")
	out := e.must(t, "rollout", "status", "web")
	if want := "held: queued, 1st in line: 1 of 1 first waves in progress in eu"; e.rolloutState(t, "web") != "queued" || !strings.Contains(out, want) {
		t.Errorf("the second canary in eu: want it queued and %q:\n%s", want, out)
	}
	if out := strings.Join(strings.Fields(e.must(t, "fleet")), " "); !strings.Contains(out, "region eu first waves in progress 1/1 1") {
		t.Errorf("fleet status lacks the bound, in use and queued:\n%s", out)
	}
	if out := e.must(t, "fleet", "pace", "--region", "eu", "--remove"); out != "removed the pacing bound of region eu\n" {
		t.Errorf("pace --remove: %q", out)
	}
	eventually.True(t, 10*time.Second, "the queued canary starts once the bound is removed", func() bool { return e.rolloutState(t, "web") == "progressing" })
}

// A spec a rollout rolled back for a failed gate stays failed: history
// marks it with the rollout and the evidence, updating to it again is
// refused naming the rollout, and --retry-failed with a reason ships it.
func TestRetryFailedSpec(t *testing.T) {
	e := newCLIEnv(t) // no agent runs: eu never turns healthy, and fails at its deadline
	e.must(t, "update", "api", "--image", "app:2", "--wave", "eu deadline=1s", "--wave", "*")
	eventually.True(t, 15*time.Second, "the canary fails its deadline and the rollout rolls back", func() bool { return e.rolloutState(t, "api") == "rolled_back" })

	out := e.must(t, "history", "api")
	rows := strings.Split(out, "\n")
	if len(rows) < 4 || !strings.Contains(rows[2], "image app:1 -> app:2  FAILED by rollout ") || !strings.Contains(rows[2], "eu") {
		t.Errorf("history does not mark revision 2 failed:\n%s", out)
	}
	e.wantRefused(t, "FailedPrecondition", "--retry-failed", "update", "api", "--image", "app:2")
	e.wantRefused(t, "InvalidArgument", "--retry-failed", "update", "api", "--image", "app:2", "--retry-failed", " ")
	out = e.must(t, "update", "api", "--image", "app:2", "--immediate", "--retry-failed", "the database is back")
	if !strings.HasPrefix(out, "updated api in every region (eu, us); now revision 4") {
		t.Errorf("retry: %q", out)
	}
	if n := e.env.DB.Ent.AuditLog.Query().Where().CountX(t.Context()); n == 0 {
		t.Error("no audit")
	}
}
