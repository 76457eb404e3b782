package cmdline

import (
	"strconv"
	"strings"
	"testing"
)

// rolloutFence is what `rollout status --output json` gives a script to
// pass back: protojson writes int64s as strings.
type rolloutFence struct {
	Rollout struct {
		ID       string `json:"id"`
		Revision int    `json:"revision"`
		Wave     int    `json:"wave"`
		Version  string `json:"version"`
		State    string `json:"state"`
	} `json:"rollout"`
}

func (f rolloutFence) flags() []string {
	return []string{"--expect-rollout", f.Rollout.ID, "--expect-revision", strconv.Itoa(f.Rollout.Revision),
		"--expect-wave", strconv.Itoa(f.Rollout.Wave), "--expect-version", f.Rollout.Version}
}

// Against a real ctrld: `rollout status` shows the rollout's id and
// version (JSON) and the fence to pass (table); promote with the fence
// of wave 1, after the rollout moved to wave 2, is refused
// FailedPrecondition saying what changed, and wave 2 is not passed; a
// fence that matches acts; a call with no fence acts on whatever is in
// flight, as scripts had it.
func TestRolloutCommandsActOnlyOnTheRolloutExpected(t *testing.T) {
	e := newCLIEnv(t) // api, app:1, in eu and us: revision 1
	if out, err := e.run("update", "api", "--image", "app:2", "--wave", "eu bake=60s", "--wave", "*"); err != nil {
		t.Fatalf("update: %v\n%s", err, out)
	}
	var seen rolloutFence
	if err := e.runJSON(t, &seen, "rollout", "status", "api"); err != nil {
		t.Fatal(err)
	}
	if seen.Rollout.ID == "" || seen.Rollout.ID == "0" || seen.Rollout.Version == "" || seen.Rollout.Version == "0" || seen.Rollout.Wave != 1 {
		t.Fatalf("status as JSON has no id or version: %+v", seen)
	}
	out, err := e.run("rollout", "status", "api")
	if want := "fence: " + strings.Join(seen.flags(), " ") + "\n"; err != nil || !strings.HasSuffix(out, want) {
		t.Errorf("status: %v; want it to end %q:\n%s", err, want, out)
	}

	// No fence: on whatever is in flight, as before.
	if out, err := e.run("rollout", "promote", "api"); err != nil || !strings.Contains(out, "state: progressing, wave 2 of 2") {
		t.Fatalf("promote without a fence: %v\n%s", err, out)
	}

	var refused struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	err = e.runJSON(t, &refused, append([]string{"rollout", "promote", "api"}, seen.flags()...)...)
	if err == nil || refused.Error.Code != "FailedPrecondition" || !strings.Contains(refused.Error.Message, "progressing at wave 2 of 2 now (was 1)") ||
		!strings.Contains(refused.Error.Message, "nothing was done") {
		t.Errorf("promote expecting wave 1, the rollout at wave 2: %v, %+v", err, refused)
	}
	var now rolloutFence
	if err := e.runJSON(t, &now, "rollout", "status", "api"); err != nil || now.Rollout.State != "progressing" || now.Rollout.Wave != 2 {
		t.Fatalf("the refused promote moved the rollout: %v, %+v", err, now)
	}

	// One flag alone is checked too.
	err = e.runJSON(t, &refused, "rollout", "abort", "api", "--expect-version", seen.Rollout.Version)
	if err == nil || refused.Error.Code != "FailedPrecondition" || !strings.Contains(refused.Error.Message, "(was "+seen.Rollout.Version+")") {
		t.Errorf("abort expecting an old version: %v, %+v", err, refused)
	}
	for _, bad := range [][]string{{"--expect-wave", "0"}, {"--expect-version", "-3"}, {"--expect-revision", "2147483648"}} {
		err = e.runJSON(t, &refused, append([]string{"rollout", "abort", "api"}, bad...)...)
		if err == nil || refused.Error.Code != "InvalidArgument" || !strings.HasPrefix(refused.Error.Message, bad[0]+" ") {
			t.Errorf("abort %v: %v, %+v; want InvalidArgument naming %s", bad, err, refused, bad[0])
		}
	}
	if err := e.runJSON(t, &now, "rollout", "status", "api"); err != nil || now.Rollout.State != "progressing" || now.Rollout.Wave != 2 {
		t.Fatalf("the refused aborts moved the rollout: %v, %+v", err, now)
	}

	// The fence of what is in flight now: it acts.
	if out, err := e.run(append([]string{"rollout", "pause", "api"}, now.flags()...)...); err != nil || !strings.Contains(out, "state: paused") {
		t.Errorf("pause expecting the rollout as it is: %v\n%s", err, out)
	}
}
