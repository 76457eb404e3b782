package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/urfave/cli/v2"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// runJSON runs the command line with --output json and decodes stdout,
// which must hold exactly one JSON document, into v. Stderr is kept apart,
// as a script sees it.
func (e *cliEnv) runJSON(t *testing.T, v any, args ...string) error {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := App()
	a.Writer, a.ErrWriter = &stdout, &stderr
	err := Run(a, append([]string{"unkey-tui", "--ctrld-address", e.env.Server.Addr, "--insecure", "--token", e.token, "--output", "json"}, args...))
	text := stdout.String()
	dec := json.NewDecoder(&stdout)
	if derr := dec.Decode(v); derr != nil {
		t.Fatalf("%v: stdout is not a JSON document (%v):\n%s", args, derr, text)
	}
	if derr := dec.Decode(new(any)); derr != io.EOF {
		t.Fatalf("%v: stdout holds more than one JSON document:\n%s", args, text)
	}
	return err
}

// deploymentsJSON is `deployments --output json` with the field names
// docs/cli-json.md gives.
type deploymentsJSON struct {
	Deployments []struct {
		DeploymentID   string `json:"deployment_id"`
		WorkspaceID    string `json:"workspace_id"`
		EnvironmentID  string `json:"environment_id"`
		Image          string `json:"image"`
		WorkflowStatus string `json:"workflow_status"`
		CreatedAt      string `json:"created_at"`
		Regions        []struct {
			Region         string `json:"region"`
			DesiredStatus  string `json:"desired_status"`
			Replicas       int    `json:"replicas"`
			ReadyInstances int    `json:"ready_instances"`
			Instances      int    `json:"instances"`
		} `json:"regions"`
	} `json:"deployments"`
}

// rows flattens the document to "id ws/env image region desired replicas".
func (d deploymentsJSON) rows() []string {
	var rows []string
	for _, dep := range d.Deployments {
		for _, r := range dep.Regions {
			rows = append(rows, strings.Join([]string{dep.DeploymentID, dep.WorkspaceID + "/" + dep.EnvironmentID, dep.Image,
				r.Region, r.DesiredStatus, strconv.Itoa(r.Replicas)}, " "))
		}
	}
	slices.Sort(rows)
	return rows
}

// tableRows gives the table's rows cut to their first six columns (those
// never empty), sorted, after checking the header.
func tableRows(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"DEPLOYMENT", "WORKSPACE/ENV", "IMAGE", "REGION", "DESIRED", "REPLICAS", "READY", "ACTUAL", "WORKFLOW", "NOT", "READY"}) {
		t.Fatalf("header %q", lines[0])
	}
	var rows []string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Join(strings.Fields(l)[:6], " "))
	}
	slices.Sort(rows)
	return rows
}

// `deployments` lists every deployment per region, as ctrld holds it, in a
// table and as JSON; --region and --workspace narrow the list.
func TestDeploymentsCommand(t *testing.T) {
	e := newCLIEnv(t)
	for _, args := range [][]string{
		{"deploy", "web", "--image", "web:2", "--region", "us", "--workspace", "other", "--environment", "dev", "--replicas", "2"},
		{"scale", "--region", "us", "api", "3"},
		{"stop", "--region", "eu", "api"},
	} {
		if out, err := e.run(args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	all := []string{"api ws/prod app:1 eu stopped 1", "api ws/prod app:1 us running 3", "web other/dev web:2 us running 2"}
	for _, c := range []struct {
		filter []string
		want   []string
	}{
		{nil, all},
		{[]string{"--region", "us"}, []string{"api ws/prod app:1 us running 3", "web other/dev web:2 us running 2"}},
		{[]string{"--workspace", "other"}, []string{"web other/dev web:2 us running 2"}},
		{[]string{"--workspace", "ws", "--region", "eu"}, []string{"api ws/prod app:1 eu stopped 1"}},
	} {
		args := append([]string{"deployments"}, c.filter...)
		out, err := e.run(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if got := tableRows(t, out); !slices.Equal(got, c.want) {
			t.Errorf("%v table rows\n got %q\nwant %q\n%s", args, got, c.want, out)
		}
		var doc deploymentsJSON
		if err := e.runJSON(t, &doc, args...); err != nil {
			t.Fatalf("%v --output json: %v", args, err)
		}
		if got := doc.rows(); !slices.Equal(got, c.want) {
			t.Errorf("%v JSON rows\n got %q\nwant %q", args, got, c.want)
		}
		for _, d := range doc.Deployments {
			if d.WorkflowStatus == "" || d.CreatedAt == "" {
				t.Errorf("%v: %s has no workflow_status or created_at", args, d.DeploymentID)
			}
		}
	}
	var none deploymentsJSON
	if err := e.runJSON(t, &none, "deployments", "--region", "mars"); err != nil || len(none.Deployments) != 0 {
		t.Fatalf("deployments in a region with none: %+v, %v", none, err)
	}
}

// resultJSON is a write command's --output json document.
type resultJSON struct {
	Action       string   `json:"action"`
	DeploymentID string   `json:"deployment_id"`
	Regions      []string `json:"regions"`
	AllRegions   bool     `json:"all_regions"`
	Replicas     *int     `json:"replicas"`
	Revision     *int     `json:"revision"`
	Restored     *int     `json:"restored"`
	Message      string   `json:"message"`
}

// A write command's JSON names the action, the deployment and the regions
// it acted in (those of the deployment for --all-regions); its message is
// the line the table output prints.
func TestWriteCommandsJSON(t *testing.T) {
	e := newCLIEnv(t)
	three := 3
	for _, c := range []struct {
		args []string
		want resultJSON
	}{
		{[]string{"scale", "--region", "eu", "api", "3"},
			resultJSON{Action: "scale", DeploymentID: "api", Regions: []string{"eu"}, Replicas: &three, Message: "scaled api to 3 in eu"}},
		{[]string{"scale", "--all-regions", "api", "3"},
			resultJSON{Action: "scale", DeploymentID: "api", Regions: []string{"eu", "us"}, AllRegions: true, Replicas: &three, Message: "scaled api to 3 in every region (eu, us)"}},
		{[]string{"stop", "--all-regions", "api"},
			resultJSON{Action: "stop", DeploymentID: "api", Regions: []string{"eu", "us"}, AllRegions: true, Message: "stopped api in every region (eu, us)"}},
		{[]string{"start", "--region", "us", "api"},
			resultJSON{Action: "start", DeploymentID: "api", Regions: []string{"us"}, Message: "started api in us"}},
		{[]string{"deploy", "web", "--image", "web:1", "--region", "eu", "--region", "us", "--workspace", "ws", "--environment", "prod", "--replicas", "3"},
			resultJSON{Action: "deploy", DeploymentID: "web", Regions: []string{"eu", "us"}, Replicas: &three, Message: "deployed web in eu, us"}},
		{[]string{"pause", "us"}, resultJSON{Action: "pause", Regions: []string{"us"}, Message: "paused us"}},
		{[]string{"resume", "us"}, resultJSON{Action: "resume", Regions: []string{"us"}, Message: "resumed us"}},
		{[]string{"resync", "eu"}, resultJSON{Action: "resync", Regions: []string{"eu"}, Message: "requested a full resync of eu"}},
	} {
		var got resultJSON
		if err := e.runJSON(t, &got, c.args...); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if g, w := mustJSON(t, got), mustJSON(t, c.want); g != w {
			t.Errorf("%v\n got %s\nwant %s", c.args, g, w)
		}
	}
	if got := e.desired(t); got["eu"] != "stopped" || got["us"] != "running" {
		t.Fatalf("desired state %v, want eu stopped and us started again", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// `regions --output json` carries ListRegions with its proto field names;
// 64-bit numbers are strings (the proto JSON mapping).
func TestRegionsJSON(t *testing.T) {
	e := newCLIEnv(t)
	if out, err := e.run("pause", "us"); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	var doc struct {
		Regions []struct {
			Region         string  `json:"region"`
			HeadVersion    string  `json:"head_version"`
			AckedVersion   string  `json:"acked_version"`
			LagChanges     string  `json:"lag_changes"`
			LagSeconds     float64 `json:"lag_seconds"`
			AgentConnected bool    `json:"agent_connected"`
			Paused         bool    `json:"paused"`
			LastError      *string `json:"last_error"`
			LastHeartbeat  any     `json:"last_heartbeat"`
		} `json:"regions"`
	}
	if err := e.runJSON(t, &doc, "regions"); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range doc.Regions {
		if n, err := strconv.ParseUint(r.HeadVersion, 10, 64); err != nil || n == 0 {
			t.Errorf("%s: head_version %q, want a version", r.Region, r.HeadVersion)
		}
		if r.LastError == nil {
			t.Errorf("%s: no last_error field", r.Region)
		}
		got[r.Region] = strings.Join([]string{r.AckedVersion, r.LagChanges, strconv.FormatBool(r.AgentConnected), strconv.FormatBool(r.Paused)}, " ")
	}
	// One change per region (api's topology row), none acked: no agent ran.
	if want := map[string]string{"eu": "0 1 false false", "us": "0 1 false true"}; !maps.Equal(got, want) {
		t.Fatalf("acked lag connected paused per region\n got %v\nwant %v", got, want)
	}
}

// With --output json a failure is still an error (exit 1, the text on
// stderr) and stdout holds one error document: ctrld's code and message,
// or InvalidArgument for a command line refused before any call.
func TestErrorsJSON(t *testing.T) {
	e := newCLIEnv(t)
	type errorJSON struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	for _, c := range []struct {
		args        []string
		code, words string
	}{
		{[]string{"resync", "mars"}, "InvalidArgument", "mars"},
		{[]string{"stop", "--region", "eu", "nope"}, "NotFound", "nope"},
		{[]string{"scale", "--region", "eu", "api", "5x"}, "InvalidArgument", `REPLICAS "5x"`},
		{[]string{"stop", "api"}, "InvalidArgument", "--region is required"},
		{[]string{"deploy", "web"}, "InvalidArgument", "image"},
		// The usage goes to stderr: stdout holds the document alone.
		{[]string{"stop", "--regoin", "eu", "api"}, "InvalidArgument", "regoin"},
	} {
		var doc errorJSON
		err := e.runJSON(t, &doc, c.args...)
		if err == nil {
			t.Fatalf("%v: no error", c.args)
		}
		if doc.Error.Code != c.code || !strings.Contains(doc.Error.Message, c.words) {
			t.Errorf("%v: error document %+v, want code %s and a message naming %s", c.args, doc.Error, c.code, c.words)
		}
	}
}

// hostile is agent-written text with what a terminal obeys or shows
// disguised: C1's CSI (0x9b, "\x1b[" in one byte) clearing the screen,
// DEL, a bidi override and isolate, a zero-width space, a BOM, a tag
// character (outside the BMP), a line separator, ESC and a tab.
const hostile = "apply failed \u009b2J\u007f\u202eevil\u2066\u200b\ufeff\U000E0041\u2028\x1b]0;t\a\tend"

// With --output json, agent-written text reaches stdout with every
// character tui.Clean keeps from a terminal escaped as \uXXXX: a script
// decodes the agent's exact words, and a person who runs the command at a
// terminal is not shown them raw.
func TestJSONEscapesWhatCleanDrops(t *testing.T) {
	e := newCLIEnv(t)
	if _, err := e.env.Agent("eu").ReportAgentStatus(t.Context(), &ctrlv1.ReportAgentStatusRequest{
		Region: "eu", AgentIdentity: "agentd-eu-0", LastError: hostile}); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	a := App()
	a.Writer, a.ErrWriter = &stdout, io.Discard
	a.ExitErrHandler = func(*cli.Context, error) {}
	if err := Run(a, []string{"unkey-tui", "--ctrld-address", e.env.Server.Addr, "--insecure", "--token", e.token, "--output", "json", "regions"}); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && tui.Unsafe(r) }); i >= 0 {
		t.Fatalf("stdout carries %U raw at byte %d:\n%q", []rune(out[i:])[0], i, out)
	}
	for _, escaped := range []string{`\u009b2J`, `\u007f`, `\u202eevil`, `\u2066`, `\u200b`, `\ufeff`, `\udb40\udc41`, `\u2028`, `\u001b]0;t\u0007\tend`} {
		if !strings.Contains(out, escaped) {
			t.Errorf("stdout lacks %s:\n%s", escaped, out)
		}
	}
	var doc struct {
		Regions []struct {
			Region    string `json:"region"`
			LastError string `json:"last_error"`
		} `json:"regions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for _, r := range doc.Regions {
		if r.Region == "eu" && r.LastError != hostile {
			t.Errorf("last_error decodes to %q, want the agent's words %q", r.LastError, hostile)
		}
	}
}

// writeJSON escapes each character Clean drops, whatever document holds it
// (results and error documents too), and leaves the rest as encoding/json
// writes it.
func TestWriteJSONEscapesEveryCharacterCleanDrops(t *testing.T) {
	var unsafe []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if tui.Unsafe(r) {
			unsafe = append(unsafe, r)
		}
	}
	in := string(unsafe) + " plain é 中 🙂"
	var out bytes.Buffer
	if err := writeJSON(&out, errorDocument(errors.New(in))); err != nil {
		t.Fatal(err)
	}
	if i := strings.IndexFunc(out.String(), func(r rune) bool { return r != '\n' && tui.Unsafe(r) }); i >= 0 {
		t.Fatalf("%U written raw", []rune(out.String()[i:])[0])
	}
	var doc struct{ Error struct{ Message string } }
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Error.Message != in {
		t.Fatalf("the message does not decode to what was written")
	}
	if !strings.Contains(out.String(), " plain é 中 🙂") {
		t.Fatalf("printable text is escaped too:\n%s", out.String()[len(out.String())-40:])
	}
}
