package tui_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// hostileText is what an agent's token holder can make ctrld store and
// serve: it retitles the terminal (OSC 0 ... BEL), clears the screen
// (CSI 2J), paints in red, rings the bell, moves to a new line, backspaces
// over text, and uses C1 CSI (U+009B) and a right-to-left override.
const hostileText = "\x1b]0;pwned\x07\x1b[2Jboom \x1b[31mred\x1b[0m\a\r\nnext\tcol\b\u009b2Jc1 \u202eevil"

// hostileText as Clean shows it: the printable words only, one line. (The
// C1 CSI goes; the "2J" after it is plain text then.)
const hostileShown = "boom red  next col2Jc1 evil"

func TestCleanDropsControlText(t *testing.T) {
	for in, want := range map[string]string{
		hostileText: hostileShown,
		"\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\":    "link", // OSC 8 hyperlink, ST-terminated
		"\x1bP+q544e\x1b\\dcs":                           "dcs",  // DCS query
		"bad \xff\x9b[2J utf-8":                          "bad \uFFFD[2J utf-8",
		"plain text, ünïcode ✓":                          "plain text, ünïcode ✓",
		"line\u2028sep\u2029para":                        "line sep para",
		"zero\u200bwidth\ufeffbom\u00adshy\U000E0041tag": "zerowidthbomshytag", // invisible format characters hide text
	} {
		if got := tui.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// hostileOperator serves hostileText in every field the console shows.
type hostileOperator struct {
	fakeOperator
	refuse bool // answer every read with an error carrying hostileText
}

func (h *hostileOperator) ListRegions(context.Context, *ctrlv1.ListRegionsRequest, ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	if h.refuse {
		return nil, status.Error(codes.Internal, hostileText)
	}
	return &ctrlv1.ListRegionsResponse{Regions: []*ctrlv1.RegionOverview{
		{Region: "eu" + hostileText, AgentConnected: true, AgentIdentity: hostileText, LastError: hostileText},
	}}, nil
}

func (h *hostileOperator) GetRegion(context.Context, *ctrlv1.GetRegionRequest, ...grpc.CallOption) (*ctrlv1.GetRegionResponse, error) {
	return &ctrlv1.GetRegionResponse{
		Overview: &ctrlv1.RegionOverview{Region: "eu" + hostileText, AgentIdentity: hostileText, LastError: hostileText},
		Deployments: []*ctrlv1.DeploymentInRegion{{DeploymentId: "api" + hostileText, DesiredStatus: hostileText,
			ActualStatus: hostileText, WorkflowStatus: hostileText, Replicas: 1}},
		Sentinels: []*ctrlv1.SentinelInRegion{{SentinelId: hostileText, DesiredState: hostileText, Health: hostileText}},
		Policies:  []*ctrlv1.PolicyInRegion{{Name: hostileText, EnvironmentId: hostileText}},
	}, nil
}

func (h *hostileOperator) ListPendingChanges(context.Context, *ctrlv1.ListPendingChangesRequest, ...grpc.CallOption) (*ctrlv1.ListPendingChangesResponse, error) {
	return &ctrlv1.ListPendingChangesResponse{Total: 1, Changes: []*ctrlv1.PendingChange{
		{Version: 1, ResourceType: hostileText, ResourceId: hostileText, CreatedAt: at(time.Second)}}}, nil
}

func (h *hostileOperator) ListDeployments(context.Context, *ctrlv1.ListDeploymentsRequest, ...grpc.CallOption) (*ctrlv1.ListDeploymentsResponse, error) {
	return &ctrlv1.ListDeploymentsResponse{Deployments: []*ctrlv1.DeploymentSummary{
		{DeploymentId: "api" + hostileText, WorkflowStatus: hostileText, WorkflowError: hostileText, Regions: []*ctrlv1.DeploymentInRegion{
			{DeploymentId: "api" + hostileText, Region: "eu" + hostileText, DesiredStatus: hostileText, ActualStatus: hostileText}}},
	}}, nil
}

func (h *hostileOperator) hostileRollout() *ctrlv1.Rollout {
	return &ctrlv1.Rollout{DeploymentId: "api" + hostileText, State: "progressing", Wave: 1, FromRevision: 1, Revision: 2,
		FromImage: hostileText, ToImage: hostileText, Actor: hostileText, Reason: hostileText, Next: hostileText, CreatedAt: at(time.Second),
		Strategy: &ctrlv1.RolloutStrategy{OnFailure: hostileText, Waves: []*ctrlv1.RolloutWave{{Regions: []string{"eu" + hostileText}}}},
		Regions:  []*ctrlv1.RolloutRegion{{Region: "eu" + hostileText, Wave: 1, State: hostileText, Why: hostileText}}}
}

func (h *hostileOperator) ListRollouts(context.Context, *ctrlv1.ListRolloutsRequest, ...grpc.CallOption) (*ctrlv1.ListRolloutsResponse, error) {
	return &ctrlv1.ListRolloutsResponse{Rollouts: []*ctrlv1.Rollout{h.hostileRollout()}}, nil
}

func (h *hostileOperator) GetRollout(context.Context, *ctrlv1.GetRolloutRequest, ...grpc.CallOption) (*ctrlv1.GetRolloutResponse, error) {
	return &ctrlv1.GetRolloutResponse{Rollout: h.hostileRollout()}, nil
}

func (h *hostileOperator) ControlRollout(_ context.Context, req *ctrlv1.ControlRolloutRequest, _ ...grpc.CallOption) (*ctrlv1.ControlRolloutResponse, error) {
	h.record(req)
	return nil, status.Error(codes.FailedPrecondition, hostileText)
}

func (h *hostileOperator) SetDesiredStatus(_ context.Context, req *ctrlv1.SetDesiredStatusRequest, _ ...grpc.CallOption) (*ctrlv1.SetDesiredStatusResponse, error) {
	h.record(req)
	return nil, status.Error(codes.FailedPrecondition, hostileText)
}

// ownStyling is what the console's NO_COLOR styles write: bold, reverse
// and reset. Anything else (a colour, a cursor move) came from elsewhere.
var ownStyling = regexp.MustCompile(`\x1b\[[17;]*m`)

// Text from the server reaches the screen without a control character in
// any view: the regions list with the last error, a region's page, the
// deployments list, a confirmation, a failed action's error, the
// rollouts list, a rollout's page and its confirmation, and the banner.
func TestServerTextCannotControlTheTerminal(t *testing.T) {
	op := &hostileOperator{}
	m := refresh(t, tui.New(op, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }}))
	check := func(view string) {
		t.Helper()
		got := ownStyling.ReplaceAllString(m.Content(), "")
		if i := strings.IndexFunc(got, func(r rune) bool { return r < ' ' && r != '\n' || r >= 0x7f && r <= 0x9f || r == '\u202e' }); i >= 0 {
			t.Fatalf("%s: control character %q at %d:\n%q", view, got[i:i+1], i, got)
		}
		if !strings.Contains(got, "boom red") {
			t.Fatalf("%s: the server's words are not shown:\n%s", view, got)
		}
	}
	update := func(msg tea.Msg) {
		next, cmd := m.Update(msg)
		m = next.(tui.Model)
		if cmd == nil {
			return
		}
		// The page's read or the action, answered at once; the expiry of
		// the status line, batched after an action, is not waited for.
		reply := cmd()
		if batch, ok := reply.(tea.BatchMsg); ok {
			reply = batch[0]()
		}
		next, _ = m.Update(reply)
		m = next.(tui.Model)
	}
	check("regions")
	update(enter)
	check("region")
	update(press('s'))
	check("confirmation")
	update(press('y')) // the action's result arrives: FAILED with the server's text
	check("failed action")
	if got := m.Content(); !strings.Contains(got, "FAILED: stop api"+hostileShown) {
		t.Fatalf("the failure is not shown:\n%s", got)
	}
	calls := op.calls()
	if len(calls) != 1 || calls[0].(*ctrlv1.SetDesiredStatusRequest).DeploymentId != "api"+hostileText {
		t.Fatalf("the action must send the server's own ID, got %v", calls)
	}
	update(tea.KeyPressMsg{Code: tea.KeyEscape})
	update(tea.KeyPressMsg{Code: tea.KeyTab})
	check("deployments")
	update(tea.KeyPressMsg{Code: tea.KeyTab})
	check("rollouts")
	update(enter)
	check("rollout")
	update(press('P'))
	check("rollout confirmation")
	update(press('y'))
	check("failed rollout action")
	update(tea.KeyPressMsg{Code: tea.KeyEscape})

	op.refuse = true
	update(tea.KeyPressMsg{Code: tea.KeyTab}) // back to regions: the read fails
	check("banner")
	if got := m.Content(); !strings.Contains(got, "ctrld unreachable, retrying: Internal: boom") {
		t.Fatalf("the banner is not shown:\n%s", got)
	}
}
