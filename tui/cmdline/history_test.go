package cmdline

import (
	"strings"
	"testing"
)

// update, rollback and history drive the real API: each result names what
// happened and where, the history says what each revision changed and who
// did it, and --output json carries the revision numbers.
func TestUpdateRollbackAndHistoryCommands(t *testing.T) {
	e := newCLIEnv(t) // api, app:1, in eu and us: revision 1
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "api", "--image", "app:2", "--env", "FOO=secret-value"}, "updated api in every region (eu, us); now revision 2\n"},
		{[]string{"update", "api", "--cpu", "500", "--memory", "512"}, "updated api in every region (eu, us); now revision 3\n"},
		{[]string{"rollback", "api"}, "rolled back api to revision 2 in every region (eu, us); now revision 4\n"},
	} {
		if out, err := e.run(s.args...); err != nil || out != s.want {
			t.Fatalf("%v: output %q, error %v; want %q", s.args, out, err, s.want)
		}
	}
	out, err := e.run("history", "api")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"REV ACTION BY AT VERSIONS WHAT CHANGED",
		"4 rollback ci-bot cpu 500m -> 250m; memory 512Mi -> 256Mi",
		"3 update ci-bot cpu 250m -> 500m; memory 256Mi -> 512Mi",
		"2 update ci-bot image app:1 -> app:2; env FOO added",
		"1 deploy ci-bot created in eu, us",
	}
	if len(rows) != len(want) {
		t.Fatalf("history:\n%s", out)
	}
	for i, row := range rows {
		// The time and the versions vary; the rest is fixed.
		f := strings.Fields(row)
		if i > 0 {
			f = append(f[:3], f[5:]...)
		}
		if got := strings.Join(f, " "); got != want[i] {
			t.Errorf("history row %d: %q, want %q", i, got, want[i])
		}
	}
	if strings.Contains(out, "secret-value") {
		t.Errorf("history shows an env value:\n%s", out)
	}

	var result resultJSON
	if err := e.runJSON(t, &result, "rollback", "api", "--to", "1"); err != nil {
		t.Fatal(err)
	}
	if result.Action != "rollback" || result.Revision == nil || *result.Revision != 5 || result.Restored == nil || *result.Restored != 1 ||
		!result.AllRegions || strings.Join(result.Regions, ",") != "eu,us" {
		t.Errorf("rollback's JSON %+v", result)
	}
	var history struct {
		Revisions []struct {
			Revision     int      `json:"revision"`
			Action       string   `json:"action"`
			Actor        string   `json:"actor"`
			Summary      string   `json:"summary"`
			FirstVersion string   `json:"first_version"`
			EnvNames     []string `json:"env_names"`
		} `json:"revisions"`
	}
	if err := e.runJSON(t, &history, "history", "api", "--limit", "1"); err != nil {
		t.Fatal(err)
	}
	if r := history.Revisions; len(r) != 1 || r[0].Revision != 5 || r[0].Action != "rollback" ||
		r[0].Summary != "image app:2 -> app:1; env FOO removed" || r[0].FirstVersion == "" || r[0].EnvNames == nil {
		t.Errorf("history's JSON %+v", r)
	}
	if d := e.env.DB.Ent.Deployment.GetX(t.Context(), "api"); d.Image != "app:1" || len(d.Env) != 0 {
		t.Errorf("after rollback to 1: image %s env %v", d.Image, d.Env)
	}
}

// Bad input is refused with the server's words or, for numbers that would
// wrap in int32, before any call.
func TestUpdateRollbackAndHistoryRefuseBadInput(t *testing.T) {
	e := newCLIEnv(t)
	for _, c := range []struct {
		args        []string
		code, words string
	}{
		{[]string{"update", "api"}, "InvalidArgument", "set at least one"},
		{[]string{"update", "api", "--image", "app:1"}, "InvalidArgument", "nothing to change"},
		{[]string{"update", "api", "--cpu", "4294967296"}, "InvalidArgument", "--cpu"},
		{[]string{"update", "api", "--env", "FOO"}, "InvalidArgument", "NAME=VALUE"},
		{[]string{"update", "nope", "--image", "app:2"}, "NotFound", "nope"},
		{[]string{"rollback", "api"}, "FailedPrecondition", "no earlier revision has another spec"},
		{[]string{"rollback", "api", "--to", "-1"}, "InvalidArgument", "--to"},
		{[]string{"rollback", "api", "--to", "7"}, "NotFound", "revision 7"},
		{[]string{"history", "api", "--limit", "501"}, "InvalidArgument", "limit"},
		{[]string{"history", "nope"}, "NotFound", "nope"},
		{[]string{"history"}, "InvalidArgument", "DEPLOYMENT_ID"},
	} {
		var doc struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := e.runJSON(t, &doc, c.args...); err == nil {
			t.Fatalf("%v: no error", c.args)
		}
		if doc.Error.Code != c.code || !strings.Contains(doc.Error.Message, c.words) {
			t.Errorf("%v: error document %+v, want code %s and a message naming %s", c.args, doc.Error, c.code, c.words)
		}
	}
	if n := e.env.DB.Ent.DeploymentRevision.Query().CountX(t.Context()); n != 1 {
		t.Errorf("refused commands left %d revisions, want the deploy's alone", n)
	}
}
