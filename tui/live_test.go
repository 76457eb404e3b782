package tui_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

func (h *hostileOperator) ListPods(context.Context, *ctrlv1.ListPodsRequest, ...grpc.CallOption) (*ctrlv1.ListPodsResponse, error) {
	return &ctrlv1.ListPodsResponse{Pods: []*ctrlv1.LivePod{{Name: "api-0" + hostileText, Phase: hostileText, Why: hostileText, SpecHash: hostileText,
		Node: hostileText, CreatedAt: at(time.Minute), Containers: []*ctrlv1.LiveContainer{{Name: hostileText, State: hostileText, Reason: hostileText,
			LastExit: hostileText, TerminationMessage: hostileText}}}}}, nil
}

func (h *hostileOperator) ListEvents(context.Context, *ctrlv1.ListEventsRequest, ...grpc.CallOption) (*ctrlv1.ListEventsResponse, error) {
	return &ctrlv1.ListEventsResponse{Events: []*ctrlv1.LiveEvent{{Object: hostileText, Type: hostileText, Reason: hostileText,
		Message: hostileText, Count: 1, LastSeen: at(time.Second)}}}, nil
}

func (h *hostileOperator) StreamLogs(context.Context, *ctrlv1.StreamLogsRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[ctrlv1.StreamLogsResponse], error) {
	// A line split in the middle of its escape sequence, as pieces may
	// split it.
	half := len(hostileText) / 2
	return &pieces{left: []string{"started\n" + hostileText[:half], hostileText[half:] + "\n"}}, nil
}

// pieces is a log stream that sends its pieces, then ends.
type pieces struct {
	grpc.ClientStream
	left []string
}

func (p *pieces) Recv() (*ctrlv1.StreamLogsResponse, error) {
	if len(p.left) == 0 {
		return nil, io.EOF
	}
	r := &ctrlv1.StreamLogsResponse{Log: p.left[0]}
	p.left = p.left[1:]
	return r, nil
}

// Everything the agent sends reaches the screen as its words only, on
// the pods page (the table, a container's termination message), the
// events page and a log, whatever ctrld let through: the console cleans
// it again.
func TestLiveViewsTextCannotControlTheTerminal(t *testing.T) {
	m := refresh(t, tui.New(&hostileOperator{}, tui.Options{Refresh: time.Millisecond, NoColor: true, Now: func() time.Time { return now }}))
	update := func(msg tea.Msg) {
		// The page's read, and a log's pieces one after the other, each
		// answered at once.
		for i := 0; msg != nil && i < 10; i++ {
			next, cmd := m.Update(msg)
			m = next.(tui.Model)
			msg = nil
			if cmd != nil {
				msg = cmd()
			}
		}
	}
	check := func(view, want string) {
		t.Helper()
		got := ownStyling.ReplaceAllString(m.Content(), "")
		if i := strings.IndexFunc(got, func(r rune) bool { return r < ' ' && r != '\n' || r >= 0x7f && r <= 0x9f || r == '\u202e' }); i >= 0 {
			t.Fatalf("%s: control character %q at %d:\n%q", view, got[i:i+1], i, got)
		}
		if !strings.Contains(got, want) {
			t.Fatalf("%s: the agent's words %q are not shown:\n%s", view, want, got)
		}
	}
	update(tea.KeyPressMsg{Code: tea.KeyTab})
	update(enter)
	check("pods", "termination message: "+hostileShown)
	update(press('e'))
	check("events", "message: "+hostileShown)
	update(tea.KeyPressMsg{Code: tea.KeyEscape})
	update(press('l'))
	check("log", "boom red")
	if got := words(m.Content()); !strings.Contains(got, "started boom red next col2Jc1 evil lines 1-3 of 3 · the follow ended") {
		t.Errorf("the log's lines:\n%s", m.Content())
	}
}

// :pods, :events and :logs complete their deployment and region from
// what the console read, and :logs its flag; a region it does not know,
// a missing pod or a flag it does not take says so above the prompt.
func TestLiveCommandsCompleteAndCheckTheirArguments(t *testing.T) {
	m, keys := commandConsole(t, tui.Options{})
	wide, _ := m.Update(tea.WindowSizeMsg{Width: 160, Height: 40}) // each error whole on its line
	*m = wide.(tui.Model)
	for typedText, want := range map[string]string{
		"po":                          ":pods ",
		"pods a":                      ":pods api",
		"events api e":                ":events api eu-west",
		"logs api eu-west api-0 --pr": ":logs api eu-west api-0 --previous",
	} {
		keys(press(':'))
		keys(typed(typedText)...)
		keys(tab)
		if got := promptLine(m); got != want {
			t.Errorf(":%s<tab> reads %q, want %q", typedText, got, want)
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEscape})
	}
	for typedText, says := range map[string]string{
		"pods api mars":                   `:pods DEPLOYMENT REGION: unknown region "mars" (known: ap-south, eu-west, us-east)`,
		"events nope eu-west":             `:events DEPLOYMENT REGION: unknown deployment "nope" (known: api, batch)`,
		"logs api eu-west":                "usage: :logs DEPLOYMENT REGION POD [--previous]",
		"logs api eu-west api-0 --follow": "usage: :logs DEPLOYMENT REGION POD [--previous]",
		"pods api":                        "usage: :pods DEPLOYMENT REGION",
	} {
		keys(press(':'))
		keys(typed(typedText)...)
		keys(tea.KeyPressMsg{Code: tea.KeyEnter})
		if got := words(m.Content()); !strings.Contains(got, says) || !strings.Contains(got, "unkey-tui · regions") {
			t.Errorf(":%s does not say %q where it was:\n%s", typedText, says, m.Content())
		}
		keys(tea.KeyPressMsg{Code: tea.KeyEscape})
	}
}
