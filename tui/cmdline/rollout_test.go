package cmdline

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/ent"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func TestParseWave(t *testing.T) {
	for _, c := range []struct {
		text string
		want *ctrlv1.RolloutWave
		err  string
	}{
		{"eu-west", &ctrlv1.RolloutWave{Regions: []string{"eu-west"}}, ""},
		{"*", &ctrlv1.RolloutWave{Regions: []string{"*"}}, ""},
		{"  eu-west   bake=60s ", &ctrlv1.RolloutWave{Regions: []string{"eu-west"}, Bake: durationpb.New(time.Minute)}, ""},
		{"us-east,ap-south bake=2m max-failures=1 deadline=10m", &ctrlv1.RolloutWave{Regions: []string{"us-east", "ap-south"},
			Bake: durationpb.New(2 * time.Minute), MaxFailures: 1, Deadline: durationpb.New(10 * time.Minute)}, ""},
		{"eu bake=0s deadline=1h30m", &ctrlv1.RolloutWave{Regions: []string{"eu"}, Bake: durationpb.New(0), Deadline: durationpb.New(90 * time.Minute)}, ""},
		{"", nil, "empty; want REGION"},
		{"bake=60s", nil, "a wave starts with its regions"},
		{"eu,,us", nil, "an empty region name"},
		{"eu,", nil, "an empty region name"},
		{"us-east, ap-south", nil, "no spaces"},
		{"eu bake=60", nil, `bake "60": want a duration like 45s`},
		{"eu bake=", nil, `bake "": want a duration`},
		{"eu bake=-1s", nil, `bake "-1s": must not be negative`},
		{"eu bake=1.5s", nil, `bake "1.5s": whole seconds only`},
		{"eu deadline=500ms", nil, `deadline "500ms": whole seconds only`},
		{"eu bake=1m bake=2m", nil, "bake given twice"},
		{"eu max-failures=x", nil, `max-failures "x": want a whole number`},
		{"eu max-failures=-1", nil, `max-failures "-1"`},
		{"eu max-failures=4294967296", nil, `max-failures "4294967296"`},
		{"eu speed=3", nil, `unknown setting "speed"`},
	} {
		got, err := parseWave(c.text)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("parseWave(%q): %v", c.text, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseWave(%q): error %v, want one saying %q", c.text, err, c.err)
		case c.err == "" && !proto.Equal(got, c.want):
			t.Errorf("parseWave(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// Rollouts through the command line, against a real ctrld: an update with
// its own waves reaches the first wave only and says so; status shows the
// waves, each region's state and time left, and what comes next; promote,
// abort, pause and resume act and are audited; an environment's strategy
// is set, shown and followed; --immediate overrides it.
func TestRolloutCommands(t *testing.T) {
	e := newCLIEnv(t) // api, app:1, in eu and us: revision 1
	images := func() map[string]string {
		t.Helper()
		r, err := e.op.ListDeployments(t.Context(), &ctrlv1.ListDeploymentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, in := range r.Deployments[0].Regions {
			got[in.Region] = in.Image
		}
		return got
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := e.run(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := must("rollout", "strategy", "show", "ws", "prod"); out != "immediate: every region at once, no gate\n" {
		t.Errorf("strategy show before any: %q", out)
	}
	out := must("update", "api", "--image", "app:2", "--wave", "eu bake=60s", "--wave", "*")
	if out != "updated api; now revision 2; rolling out in 2 waves, eu first (unkey-tui rollout status api)\n" {
		t.Errorf("update with waves: %q", out)
	}
	if got := images(); got["eu"] != "app:2" || got["us"] != "app:1" {
		t.Fatalf("after the update: %v, want app:2 in eu only", got)
	}

	out = must("rollout", "status", "api")
	lines := strings.Split(out, "\n")
	for i, want := range []string{
		"api: revision 1 -> 2, image app:1 -> app:2, by ci-bot at ",
		"state: progressing, wave 1 of 2 (on failure: rollback)",
		"WAVE REGION STATE TIME LEFT WHY",
		"1 eu progressing deadline in ", // 10m or 9m59s, as the clock goes
		"2 us waiting -",
		"next: wave 2 (us) once eu is healthy for 1m (deadline in ",
	} {
		if i >= len(lines) || !strings.HasPrefix(strings.Join(strings.Fields(lines[i]), " "), want) {
			t.Errorf("status line %d: want it to start %q; got\n%s", i, want, out)
			break
		}
	}
	var status struct {
		Rollout struct {
			State    string `json:"state"`
			Wave     int    `json:"wave"`
			ToImage  string `json:"to_image"`
			Strategy struct {
				Waves []struct {
					Regions  []string `json:"regions"`
					Bake     string   `json:"bake"`
					Deadline string   `json:"deadline"`
				} `json:"waves"`
			} `json:"strategy"`
			Regions []struct {
				Region       string  `json:"region"`
				State        string  `json:"state"`
				Wave         int     `json:"wave"`
				DeadlineLeft *string `json:"deadline_left"`
			} `json:"regions"`
			Next string `json:"next"`
		} `json:"rollout"`
	}
	if err := e.runJSON(t, &status, "rollout", "status", "api"); err != nil {
		t.Fatal(err)
	}
	if r := status.Rollout; r.State != "progressing" || r.Wave != 1 || r.ToImage != "app:2" || len(r.Strategy.Waves) != 2 ||
		r.Strategy.Waves[0].Bake != "60s" || r.Strategy.Waves[1].Deadline != "600s" || len(r.Regions) != 2 ||
		r.Regions[0].Region != "eu" || r.Regions[0].DeadlineLeft == nil || r.Regions[1].DeadlineLeft != nil || !strings.HasPrefix(r.Next, "wave 2 (us)") {
		t.Errorf("status as JSON: %+v", r)
	}

	// One rollout at a time.
	var refused struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := e.runJSON(t, &refused, "update", "api", "--image", "app:3"); err == nil || refused.Error.Code != "FailedPrecondition" ||
		!strings.Contains(refused.Error.Message, "rollout in flight") {
		t.Errorf("an update in flight: %v, %+v", err, refused)
	}

	out = must("rollout", "promote", "api")
	if !strings.HasPrefix(out, "promoted the rollout of api\n") || !strings.Contains(out, "state: progressing, wave 2 of 2") ||
		!strings.Contains(out, "next: every region on revision 2 once us is healthy") {
		t.Errorf("promote:\n%s", out)
	}
	if got := images(); got["eu"] != "app:2" || got["us"] != "app:2" {
		t.Errorf("after promote: %v", got)
	}
	if out := must("rollout", "pause", "api"); !strings.Contains(out, "state: paused") || !strings.Contains(out, "next: nothing until an operator resumes it") {
		t.Errorf("pause:\n%s", out)
	}
	if out := must("rollout", "resume", "api"); !strings.Contains(out, "state: progressing, wave 2 of 2") {
		t.Errorf("resume:\n%s", out)
	}
	var aborted struct {
		Rollout struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"rollout"`
	}
	if err := e.runJSON(t, &aborted, "rollout", "abort", "api"); err != nil || aborted.Rollout.State != "rolled_back" || aborted.Rollout.Reason != "aborted by ci-bot" {
		t.Errorf("abort: %v, %+v", err, aborted)
	}
	if got := images(); got["eu"] != "app:1" || got["us"] != "app:1" {
		t.Errorf("after abort: %v", got)
	}
	if out := must("rollout", "list"); !strings.Contains(strings.Join(strings.Fields(out), " "), "api 1 -> 2 rolled_back 2/2 app:2") {
		t.Errorf("list:\n%s", out)
	}

	// The environment's strategy, set and followed; --immediate wins.
	out = must("rollout", "strategy", "set", "ws", "prod", "--wave", "us bake=2m deadline=5m", "--wave", "*", "--on-failure", "pause")
	if want := "set the rollout strategy of ws/prod:\n" +
		"wave 1: us; bake 2m, max failures 0, deadline 5m\n" +
		"wave 2: every other region (*); bake 0s, max failures 0, deadline 10m\n" +
		"on failure: pause\n"; out != want {
		t.Errorf("strategy set:\n%s\nwant\n%s", out, want)
	}
	if out := must("rollout", "strategy", "show", "ws", "prod"); !strings.HasPrefix(out, "wave 1: us; bake 2m") {
		t.Errorf("strategy show:\n%s", out)
	}
	if out := must("rollback", "api", "--immediate"); out != "rolled back api to revision 2 in every region (eu, us); now revision 4\n" {
		t.Errorf("rollback --immediate: %q", out)
	}
	if got := images(); got["eu"] != "app:2" || got["us"] != "app:2" {
		t.Errorf("after rollback --immediate: %v", got)
	}
	if out := must("update", "api", "--image", "app:5"); out != "updated api; now revision 5; rolling out in 2 waves, us first (unkey-tui rollout status api)\n" {
		t.Errorf("update under the environment's strategy: %q", out)
	}
	if got := images(); got["eu"] != "app:2" || got["us"] != "app:5" {
		t.Errorf("under the environment's strategy: %v, want app:5 in us only", got)
	}

	var actions []string
	for _, l := range e.env.DB.Ent.AuditLog.Query().Order(ent.Asc("id")).AllX(t.Context()) {
		if strings.HasPrefix(l.Action, "rollout.") || l.Action == "set-rollout-strategy" {
			actions = append(actions, l.Action)
		}
	}
	if got := strings.Join(actions, " "); got != "rollout.promote rollout.pause rollout.resume rollout.abort set-rollout-strategy" {
		t.Errorf("audited: %s", got)
	}
}

// Bad rollout input is refused, locally when it cannot be read and by
// ctrld otherwise, with a JSON error document naming it, and changes
// nothing.
func TestRolloutCommandsRefuseBadInput(t *testing.T) {
	e := newCLIEnv(t)
	update := func(flags ...string) []string { return append([]string{"update", "api", "--image", "app:2"}, flags...) }
	for _, c := range []struct {
		args        []string
		code, words string
	}{
		{update("--wave", "eu bake=1.5s"), "InvalidArgument", `--wave "eu bake=1.5s": bake "1.5s": whole seconds only`},
		{update("--wave", "eu bake=-1s"), "InvalidArgument", "must not be negative"},
		{update("--wave", "eu us"), "InvalidArgument", "no spaces"},
		{update("--wave", "eu", "--on-failure", "explode"), "InvalidArgument", `--on-failure "explode": want rollback or pause`},
		{update("--on-failure", "pause"), "InvalidArgument", "--on-failure: give it with the --wave"},
		{update("--immediate", "--wave", "eu"), "InvalidArgument", "--immediate: give it alone"},
		{update("--wave", "eu max-failures=1"), "InvalidArgument", "rollout.waves[0].max_failures"},
		{update("--wave", "eu", "--wave", "us,eu"), "InvalidArgument", "rollout.waves[1].regions"},
		{[]string{"deploy", "web", "--image", "app:1", "--region", "eu", "--workspace", "ws", "--environment", "prod", "--wave", "eu deadline=0s"}, "InvalidArgument", "rollout.waves[0].deadline"},
		{[]string{"rollback", "api", "--to", "1", "--wave", "eu bake=25h"}, "InvalidArgument", "rollout.waves[0].bake"},
		{[]string{"rollout", "strategy", "set", "ws", "prod"}, "InvalidArgument", "give the waves"},
		{[]string{"rollout", "strategy", "set", "ws", "prod", "--wave", "eu", "--wave", "eu"}, "InvalidArgument", "strategy.waves[1].regions"},
		{[]string{"rollout", "strategy", "set", "ws"}, "InvalidArgument", "WORKSPACE_ID ENVIRONMENT_ID"},
		{[]string{"rollout", "promote", "api"}, "FailedPrecondition", "no rollout in flight"},
		{[]string{"rollout", "abort", "nope"}, "NotFound", "nope"},
		{[]string{"rollout", "status", "api"}, "NotFound", "no rollout"},
		{[]string{"rollout", "status"}, "InvalidArgument", "DEPLOYMENT_ID"},
		{[]string{"rollout", "list", "--limit", "501"}, "InvalidArgument", "limit"},
		{[]string{"rollout", "bogus"}, "InvalidArgument", `unknown command "bogus"`},
		{[]string{"rollout"}, "InvalidArgument", "give a command"},
	} {
		var doc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := e.runJSON(t, &doc, c.args...); err == nil {
			t.Fatalf("%v: no error", c.args)
		}
		if doc.Error.Code != c.code || !strings.Contains(doc.Error.Message, c.words) {
			t.Errorf("%v: error document %+v, want code %s and a message naming %s", c.args, doc.Error, c.code, c.words)
		}
	}
	ctx := t.Context()
	if n := e.env.DB.Ent.DeploymentRevision.Query().CountX(ctx); n != 1 {
		t.Errorf("refused commands left %d revisions, want the deploy's alone", n)
	}
	if n := e.env.DB.Ent.Rollout.Query().CountX(ctx) + e.env.DB.Ent.RolloutStrategy.Query().CountX(ctx); n != 0 {
		t.Errorf("refused commands left %d rollouts and strategies", n)
	}
	if d := e.env.DB.Ent.Deployment.GetX(ctx, "api"); d.Image != "app:1" {
		t.Errorf("refused commands changed the image to %s", d.Image)
	}
}
