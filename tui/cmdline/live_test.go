package cmdline

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// standInAgent answers eu's live views as an agent would, on ctrld's side
// of the agent's calls (agentd's serving is agentd/liveview's to test).
func standInAgent(t *testing.T, e *cliEnv) {
	t.Helper()
	ctx := t.Context()
	c := e.env.Agent("eu")
	s, err := c.LiveRequests(ctx, &ctrlv1.LiveRequestsRequest{Region: "eu", AgentIdentity: "agent-eu", Serves: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				return
			}
			call, err := c.LiveAnswer(ctx)
			if err != nil {
				return
			}
			switch req.Kind {
			case "pods":
				call.Send(&ctrlv1.LiveAnswerRequest{Id: req.Id, Done: true, Pods: []*ctrlv1.LivePod{{Name: "api-0", Phase: "Running", Restarts: 3,
					Why: "CrashLoopBackOff", SpecHash: "h", Node: "kwok-node", CreatedAt: timestamppb.New(time.Now().Add(-90 * time.Second)),
					Containers: []*ctrlv1.LiveContainer{{Name: "app", TerminationMessage: "panic: DATABASE_URL is not set"}}}}})
			case "events":
				call.Send(&ctrlv1.LiveAnswerRequest{Id: req.Id, Done: true, Events: []*ctrlv1.LiveEvent{{Object: "Pod api-0", Type: "Warning",
					Reason: "BackOff", Message: "Back-off restarting failed container \x1b[2J", Count: 4, LastSeen: timestamppb.Now()}}})
			case "logs":
				call.Send(&ctrlv1.LiveAnswerRequest{Id: req.Id, Log: "starting\n\x1b]0;owned\x07panic: DATABASE_URL is not set\n", Done: true})
			}
			call.CloseAndRecv()
		}
	}()
}

func TestPodsEventsAndLogsFromTheAgent(t *testing.T) {
	e := newCLIEnv(t)
	standInAgent(t, e)
	var out string
	eventually.True(t, 5*time.Second, "pods", func() bool {
		var err error
		out, err = e.run("pods", "api", "--region", "eu")
		return err == nil
	})
	for _, want := range []string{"POD    PHASE    READY  RESTARTS  WHY", "api-0  Running  false  3         CrashLoopBackOff (app: \"panic: DATABASE_URL is not set\")", "kwok-node  1m30s"} {
		if !strings.Contains(out, want) {
			t.Errorf("pods:\n%s\nwant %q", out, want)
		}
	}
	out, err := e.run("events", "api", "--region", "eu")
	if err != nil || !strings.Contains(out, "Warning  BackOff  Pod api-0  4      Back-off restarting failed container") || strings.Contains(out, "\x1b") {
		t.Errorf("events: %v\n%q", err, out)
	}
	out, err = e.run("logs", "api", "api-0", "--region", "eu", "--previous")
	if err != nil || out != "starting\npanic: DATABASE_URL is not set\n" {
		t.Errorf("logs: %v\n%q, want the lines with the terminal's title sequence removed", err, out)
	}
	if out, err := e.run("logs", "api", "--region", "eu"); err == nil || !strings.Contains(out+err.Error(), "want DEPLOYMENT_ID POD") {
		t.Errorf("logs without a pod: %v\n%s", err, out)
	}
	if out, err := e.run("pods", "api", "--region", "us"); err == nil || !strings.Contains(out+err.Error(), "Unavailable") {
		t.Errorf("pods where no agent is connected: %v\n%s", err, out)
	}
}
