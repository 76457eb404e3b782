package tui_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// regionOperator is fakeOperator with the regions and the region a test
// gives (each where set).
type regionOperator struct {
	*fakeOperator
	regions []*ctrlv1.RegionOverview
	region  *ctrlv1.GetRegionResponse
}

func (f *regionOperator) ListRegions(ctx context.Context, req *ctrlv1.ListRegionsRequest, opts ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	if f.regions == nil {
		return f.fakeOperator.ListRegions(ctx, req, opts...)
	}
	return &ctrlv1.ListRegionsResponse{Regions: f.regions}, nil
}

func (f *regionOperator) GetRegion(ctx context.Context, req *ctrlv1.GetRegionRequest, opts ...grpc.CallOption) (*ctrlv1.GetRegionResponse, error) {
	if f.region == nil {
		return f.fakeOperator.GetRegion(ctx, req, opts...)
	}
	return f.region, nil
}

// console is a console of width×24 on op, its first reads answered.
type console struct{ m tui.Model }

func newConsole(t *testing.T, op ctrlv1.OperatorServiceClient, width int) *console {
	t.Helper()
	c := &console{tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }})}
	c.update(tea.WindowSizeMsg{Width: width, Height: 24})
	c.m = refresh(t, c.m)
	return c
}

func (c *console) update(msg tea.Msg) tea.Cmd {
	next, cmd := c.m.Update(msg)
	c.m = next.(tui.Model)
	return cmd
}

// turn presses k, which turns to a page, and answers the page's read.
func (c *console) turn(k tea.KeyPressMsg) { c.update(c.update(k)()) }

func (c *console) press(ks ...tea.KeyPressMsg) {
	for _, k := range ks {
		c.update(k)
	}
}

// line is the first line of the console that holds text.
func (c *console) line(t *testing.T, text string) string {
	t.Helper()
	for _, l := range strings.Split(c.m.Content(), "\n") {
		if strings.Contains(l, text) {
			return l
		}
	}
	t.Fatalf("no line holds %q:\n%s", text, c.m.Content())
	return ""
}

// The AGENT column says up or down and for how long in full, at 80 and
// 120 columns: "down 52s a…" left the operator guessing.
func TestAgentColumnIsNeverCut(t *testing.T) {
	op := &regionOperator{fakeOperator: &fakeOperator{}, regions: []*ctrlv1.RegionOverview{
		{Region: "us-east", AgentConnected: false, LastHeartbeat: at(52 * time.Second)},
		{Region: "eu-west", AgentConnected: true, ConnectedSince: at(3 * time.Minute)},
		{Region: "ap-south", AgentConnected: false, LastHeartbeat: at(400 * time.Hour)},
	}}
	for _, width := range []int{80, 120} {
		c := newConsole(t, op, width)
		for region, want := range map[string]string{"us-east": " down 52s ", "eu-west": " up 3m ", "ap-south": " down 400h "} {
			if row := c.line(t, region); !strings.Contains(row, want) || strings.Contains(row, "…") {
				t.Errorf("at %d columns, %s's row lacks %q or is cut: %q", width, region, want, row)
			}
		}
	}
}

// The region page's state is never cut, however long the agent's name and
// however narrow the screen: it is what the operator opened the page for.
func TestRegionStateIsNeverCut(t *testing.T) {
	overview := &ctrlv1.RegionOverview{Region: "eu-west", HeadVersion: 4, AckedVersion: 3, LagChanges: 1, LagSeconds: 49.1,
		AgentIdentity: "agentd-eu-west-0-with-a-long-pod-name", LastHeartbeat: at(time.Minute), Paused: true, PausedSince: at(time.Minute),
		LastError: "stream: connection refused"}
	op := &regionOperator{fakeOperator: &fakeOperator{}, regions: []*ctrlv1.RegionOverview{overview},
		region: &ctrlv1.GetRegionResponse{Overview: overview}}
	for _, width := range []int{80, 120, 30} {
		c := newConsole(t, op, width)
		c.turn(enter)
		if line := c.line(t, "state "); !strings.HasPrefix(line, "  state DOWN,PAUSED,LAGGING,ERROR") {
			t.Errorf("at %d columns, the state is cut or not first: %q", width, line)
		}
	}
}

// The agent's last error is said once: in the server's reason where it
// gives one (agent_error), else as the console's "last error" (a down
// agent, whose reason the DOWN line replaces, or an older server).
func TestAgentErrorIsSaidOnce(t *testing.T) {
	const lastError = `stream: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7070: connect: connection refused"`
	connected := &ctrlv1.RegionOverview{Region: "eu-west", HeadVersion: 4, AckedVersion: 3, LagChanges: 1, AgentConnected: true,
		AgentIdentity: "agentd-eu-west-0", ConnectedSince: at(time.Minute), Paused: true, PausedSince: at(time.Minute), LastError: lastError,
		NotInSync: []*ctrlv1.SyncReason{
			{Code: "paused", Message: "the region is paused since 11:59:00 UTC (1m ago); resume it to deliver changes"},
			{Code: "agent_error", Message: "the agent reports: " + lastError},
			{Code: "waiting", Message: "waiting for 1 change (oldest 49s)"},
		}}
	down := &ctrlv1.RegionOverview{Region: "us-east", LastHeartbeat: at(time.Minute), LastError: lastError,
		NotInSync: []*ctrlv1.SyncReason{{Code: "agent_down", Message: "the agent is down; its last error: " + lastError}}}
	for _, tc := range []struct {
		overview *ctrlv1.RegionOverview
		want     string
	}{{connected, "the agent reports: "}, {down, "last error: "}} {
		op := &regionOperator{fakeOperator: &fakeOperator{}, regions: []*ctrlv1.RegionOverview{tc.overview},
			region: &ctrlv1.GetRegionResponse{Overview: tc.overview}}
		c := newConsole(t, op, 200) // wide enough for the whole error
		for _, page := range []string{"regions", "region"} {
			if page == "region" {
				c.turn(enter)
			}
			got := c.m.Content()
			if n := strings.Count(got, "connect: connection refused"); n != 1 || !strings.Contains(got, tc.want+lastError) {
				t.Errorf("%s page of %s: the last error is said %d times, want once after %q:\n%s", page, tc.overview.Region, n, tc.want, got)
			}
		}
	}
}

// "/" on the history page filters the revisions by action, actor and
// summary, and says so in the help; a rollback from the filtered list
// still compares with the current spec, which the filter may hide.
func TestHistoryFilter(t *testing.T) {
	op := &fakeOperator{}
	c := newConsole(t, op, 120)
	c.turn(tea.KeyPressMsg{Code: tea.KeyTab})
	c.turn(press('h'))
	if got := c.m.Content(); !strings.Contains(got, "/ filter") {
		t.Errorf("the history's help does not offer the filter:\n%s", got)
	}
	for filter, want := range map[string][]string{
		"alice":   {"3", "1"},      // actor
		"scale":   {"2"},           // action
		"us-east": {"4", "2", "1"}, // summary
	} {
		c.press(press('/'))
		for _, r := range filter {
			c.press(press(r))
		}
		c.press(enter)
		var revs []string
		for _, l := range strings.Split(ansi.Strip(c.m.Content()), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[2] == "ago" { // a revision's row
				revs = append(revs, f[0])
			}
		}
		if strings.Join(revs, ",") != strings.Join(want, ",") {
			t.Errorf("filter %q shows revisions %q, want %q:\n%s", filter, revs, want, c.m.Content())
		}
	}
	c.press(press('/'), press('a'), press('l'), press('i'), press('c'), press('e'), enter, tea.KeyPressMsg{Code: tea.KeyUp}, press('r')) // revision 3, the first shown
	if got := c.m.Content(); !strings.Contains(got, "Roll back deployment api to revision 3 (now 4)?") {
		t.Errorf("a rollback from the filtered list does not restore the selected revision over the current one:\n%s", got)
	}
}

// A sentinel's or a policy's failing apply shows under it, like a
// deployment's: since when and the error's end.
func TestFailingSentinelAndPolicyShowTheirError(t *testing.T) {
	overview := &ctrlv1.RegionOverview{Region: "us-east", AgentConnected: true, AgentIdentity: "krane-us-0"}
	op := &regionOperator{fakeOperator: &fakeOperator{}, regions: []*ctrlv1.RegionOverview{overview},
		region: &ctrlv1.GetRegionResponse{Overview: overview,
			Sentinels: []*ctrlv1.SentinelInRegion{{SentinelId: "gw", DesiredState: "running", Replicas: 2,
				Sync: &ctrlv1.ResourceSyncState{Reported: true, Error: "apply Deployment gw: image pull back-off", FailingSince: at(4 * time.Minute)}}},
			Policies: []*ctrlv1.PolicyInRegion{{PolicyId: "p1", Name: "allow-api", DeploymentId: "api",
				Sync: &ctrlv1.ResourceSyncState{Reported: true, Error: `apply CiliumNetworkPolicy allow-api: no matches for kind "CiliumNetworkPolicy"`, FailingSince: at(2 * time.Minute)}}},
		}}
	c := newConsole(t, op, 120)
	c.turn(enter)
	lines := strings.Split(c.m.Content(), "\n")
	for row, want := range map[string]string{
		"sentinel gw":        "↳ apply failing 4m: apply Deployment gw: image pull back-off",
		"policy   allow-api": `↳ apply failing 2m: apply CiliumNetworkPolicy allow-api: no matches for kind "CiliumNetworkPolicy"`,
	} {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, row) })
		if i < 0 || i+1 == len(lines) || !strings.Contains(lines[i+1], want) {
			t.Errorf("no %q under %q:\n%s", want, row, c.m.Content())
		}
	}
}

// A rollback to a revision with other replicas says, before it is
// confirmed, that they change in every region at once (its spec may roll
// out in waves), and that an abort returns the spec only; one with the
// same replicas does not.
func TestARollbacksConfirmationSaysItsReplicasChangeAtOnce(t *testing.T) {
	const note = "Replicas change in every region now"
	for filter, want := range map[string]bool{"deploy": true, "update": false} { // revision 1: 2 replicas, not 3; revision 3: 3
		c := newConsole(t, &fakeOperator{}, 160)
		c.turn(tea.KeyPressMsg{Code: tea.KeyTab})
		c.turn(press('h'))
		c.press(press('/'))
		for _, r := range filter {
			c.press(press(r))
		}
		c.press(enter, tea.KeyPressMsg{Code: tea.KeyUp}, press('r'))
		got := words(c.m.Content())
		if !strings.Contains(got, "Roll back deployment api") {
			t.Fatalf("%s: no rollback confirmation:\n%s", filter, c.m.Content())
		}
		if strings.Contains(got, note) != want {
			t.Errorf("%s: the confirmation says %q: %v, want %v:\n%s", filter, note, !want, want, c.m.Content())
		}
	}
}
