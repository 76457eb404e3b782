package tui_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// standInAgent answers a region's live views as an agent would, on
// ctrld's side of the agent's calls (LiveRequests, LiveAnswer): what
// agentd serves is agentd/liveview's to test; here it is what the
// console does with the answers.
type standInAgent struct {
	pods   []*ctrlv1.LivePod
	events []*ctrlv1.LiveEvent
	// current and previous are the logs of the container's runs.
	current, previous string
	// follow is what a follow sends after current, a piece each.
	follow chan string
	// silent: the agent takes requests and never answers.
	silent atomic.Bool

	mu       sync.Mutex
	requests []*ctrlv1.LiveRequest
	// followsEnded gets a value each time a follow's answer ended on
	// ctrld's side: the person stopped reading.
	followsEnded chan struct{}
}

// start opens the agent's LiveRequests stream for region on env and
// answers until the test ends; it returns once ctrld relays to it.
func (a *standInAgent) start(t *testing.T, env *servertest.Env, region, deployment string) *standInAgent {
	t.Helper()
	if a.follow == nil {
		a.follow = make(chan string, 16)
	}
	a.followsEnded = make(chan struct{}, 16)
	ctx := t.Context()
	c := env.Agent(region)
	s, err := c.LiveRequests(ctx, &ctrlv1.LiveRequestsRequest{Region: region, AgentIdentity: "agent-" + region, Serves: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.requests = append(a.requests, req)
			a.mu.Unlock()
			if a.silent.Load() {
				continue
			}
			go a.answer(ctx, c, req)
		}
	}()
	op := env.Operator("probe")
	eventually.True(t, 5*time.Second, "ctrld relays to the stand-in agent", func() bool {
		_, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: deployment, Region: region})
		return err == nil
	})
	return a
}

func (a *standInAgent) answer(ctx context.Context, c ctrlv1.ClusterServiceClient, req *ctrlv1.LiveRequest) {
	call, err := c.LiveAnswer(ctx)
	if err != nil {
		return
	}
	defer call.CloseAndRecv()
	send := func(m *ctrlv1.LiveAnswerRequest) error {
		m.Id = req.Id
		return call.Send(m)
	}
	switch req.Kind {
	case "pods":
		send(&ctrlv1.LiveAnswerRequest{Pods: a.pods, Done: true})
	case "events":
		send(&ctrlv1.LiveAnswerRequest{Events: a.events, Done: true})
	case "logs":
		text := a.current
		if req.Previous {
			text = a.previous
		}
		for len(text) > 0 { // in pieces of 64 KiB, as agents send them
			n := min(len(text), 64<<10)
			if send(&ctrlv1.LiveAnswerRequest{Log: text[:n]}) != nil {
				return
			}
			text = text[n:]
		}
		if !req.Follow {
			send(&ctrlv1.LiveAnswerRequest{Done: true})
			return
		}
		for {
			var piece string
			select {
			case piece = <-a.follow:
			case <-time.After(20 * time.Millisecond): // an empty piece finds out whether anyone reads
			case <-ctx.Done():
				return
			}
			if send(&ctrlv1.LiveAnswerRequest{Log: piece}) != nil {
				a.followsEnded <- struct{}{}
				return
			}
		}
	}
}

// asked is the live requests of kind the agent got.
func (a *standInAgent) asked(kind string) []*ctrlv1.LiveRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*ctrlv1.LiveRequest
	for _, r := range a.requests {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// crashLooping is what a stand-in agent says of a crash-looping
// deployment's pods.
func crashLooping(deployment string) *standInAgent {
	var pods []*ctrlv1.LivePod
	for i := range 2 {
		pods = append(pods, &ctrlv1.LivePod{Name: fmt.Sprintf("%s-%d", deployment, i), Phase: "Running", Restarts: 3, Why: "CrashLoopBackOff",
			SpecHash: "h", Node: "kwok-node", CreatedAt: timestamppb.New(time.Now().Add(-90 * time.Second)),
			Containers: []*ctrlv1.LiveContainer{{Name: "app", Restarts: 3, State: "waiting", Reason: "CrashLoopBackOff",
				LastExit: "Error (exit code 2)", TerminationMessage: "panic: DATABASE_URL is not set"}}})
	}
	return &standInAgent{pods: pods,
		events: []*ctrlv1.LiveEvent{
			{Object: "Pod " + deployment + "-0", Type: "Normal", Reason: "Pulled", Message: "Container image already present", Count: 5, LastSeen: timestamppb.New(time.Now().Add(-time.Minute))},
			{Object: "Pod " + deployment + "-0", Type: "Warning", Reason: "BackOff", Message: "Back-off restarting failed container app", Count: 4, LastSeen: timestamppb.Now()},
		},
		current:  "starting " + deployment + "\nlistening on :8080\n",
		previous: "starting " + deployment + "\npanic: DATABASE_URL is not set\n",
	}
}

// program is the console run as the program loop runs it: each command
// in a goroutine of its own, its message fed back to Update on the
// test's goroutine, so a follow's read may block as it does in a
// session.
type program struct {
	t    *testing.T
	m    tui.Model
	msgs chan tea.Msg
	done chan struct{}
}

// runConsole runs a console on op, 160 by 40, until the test ends.
func runConsole(t *testing.T, op ctrlv1.OperatorServiceClient, readOnly bool) *program {
	t.Helper()
	p := &program{t: t, m: tui.New(op, tui.Options{Refresh: 20 * time.Millisecond, NoColor: true, ReadOnly: readOnly}),
		msgs: make(chan tea.Msg, 64), done: make(chan struct{})}
	t.Cleanup(func() { close(p.done) })
	p.send(tea.WindowSizeMsg{Width: 160, Height: 40})
	p.run(p.m.Init())
	return p
}

func (p *program) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		msg := cmd()
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch {
				p.run(c)
			}
			return
		}
		select {
		case p.msgs <- msg:
		case <-p.done:
		}
	}()
}

func (p *program) send(msg tea.Msg) {
	if _, quit := msg.(tea.QuitMsg); quit || msg == nil {
		return
	}
	next, cmd := p.m.Update(msg)
	p.m = next.(tui.Model)
	p.run(cmd)
}

// press presses keys, one after the other.
func (p *program) press(keys ...tea.KeyPressMsg) {
	for _, k := range keys {
		p.send(k)
	}
}

// shows runs the console until its screen says each of want (as words,
// see words), and returns it.
func (p *program) shows(within time.Duration, want ...string) string {
	p.t.Helper()
	deadline := time.After(within)
	for {
		got := words(p.m.Content())
		missing := ""
		for _, w := range want {
			if !strings.Contains(got, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return got
		}
		select {
		case msg := <-p.msgs:
			p.send(msg)
		case <-deadline:
			p.t.Fatalf("the console does not say %q within %s:\n%s", missing, within, p.m.Content())
		}
	}
}

// settle runs the console for d.
func (p *program) settle(d time.Duration) {
	deadline := time.After(d)
	for {
		select {
		case msg := <-p.msgs:
			p.send(msg)
		case <-deadline:
			return
		}
	}
}

var esc = tea.KeyPressMsg{Code: tea.KeyEscape}

// liveEnv is a real ctrld with deployment api in eu-west and us-east,
// and an operator.
func liveEnv(t *testing.T) (*servertest.Env, ctrlv1.OperatorServiceClient) {
	t.Helper()
	env := servertest.Start(t, server.Config{})
	env.AgentToken("eu-west")
	env.AgentToken("us-east")
	op := env.Operator("oncall")
	if _, err := op.Deploy(context.Background(), &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu-west", "us-east"}, Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	return env, op
}

// Against a real ctrld and its rollout driver, with a stand-in agent in
// the canary: the rollout rolled back, and its page opens on the failed
// region; enter shows its pods, why they are not ready with the
// container's termination message; e their events; back, l a pod's log
// as it runs now, and p the run before, the one that crashed, with its
// last line.
func TestConsoleGoesFromAFailedRegionToItsPodsEventsAndLogs(t *testing.T) {
	env := servertest.Start(t, server.Config{RolloutInterval: 50 * time.Millisecond})
	for _, r := range rolloutRegions {
		env.AgentToken(r)
	}
	op := env.Operator("oncall")
	ctx := context.Background()
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "web", WorkspaceId: "acme", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: rolloutRegions, Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	agent := crashLooping("web").start(t, env, "eu-west", "web")
	image := "app:crashloop"
	if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "web", Image: &image, Rollout: canaryThenRest()}); err != nil {
		t.Fatal(err)
	}
	rollBackOnCrashLoop(t, env, op, "web")

	c := runConsole(t, op, false)
	c.shows(5*time.Second, "eu-west")
	c.press(tea.KeyPressMsg{Code: tea.KeyTab}, tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "web 1 -> 2 rolled_back")
	c.press(enter)
	got := c.shows(5*time.Second, "state ROLLED BACK", "1 eu-west failed", "enter pods")
	if selected := selectedLine(c.m.Content()); !strings.Contains(selected, "eu-west") || !strings.Contains(selected, "failed") {
		t.Fatalf("the rollout page does not open on the failed region (selected %q):\n%s", selected, got)
	}

	c.press(enter)
	c.shows(5*time.Second, "pods of web in eu-west",
		`web-0 Running 0/1 3`, `kwok-node 1m CrashLoopBackOff (app: "panic: DATABASE_URL is not set")`,
		"container app: not ready, waiting CrashLoopBackOff, restarts 3, last run ended Error (exit code 2)",
		"termination message: panic: DATABASE_URL is not set",
		"esc back • l/enter logs • e events")

	c.press(press('e'))
	c.shows(5*time.Second, "events of web in eu-west", "2 events, newest first",
		"Warning BackOff Pod web-0 4 Back-off restarting failed container app", "Normal Pulled Pod web-0 5 Container image already present",
		"message: Back-off restarting failed container app")
	c.press(esc)
	c.shows(5*time.Second, "pods of web in eu-west")

	c.press(press('l'))
	c.shows(5*time.Second, "log of web-0 (web in eu-west)", "current run: the last 500 lines, then new ones as they come",
		"starting web", "listening on :8080", "lines 1-2 of 2 · following")
	c.press(press('p'))
	got = c.shows(5*time.Second, "the run before (the one that crashed)", "panic: DATABASE_URL is not set", "the end of the log")
	if strings.Contains(got, "listening on :8080") {
		t.Errorf("the previous run shows the current one's lines:\n%s", got)
	}
	logs := agent.asked("logs")
	if len(logs) != 2 || logs[0].Pod != "web-0" || logs[0].Previous || !logs[0].Follow || !logs[1].Previous || logs[1].Follow {
		t.Errorf("the agent was asked for %v, want web-0's current run followed, then its previous run", logs)
	}
	c.press(esc)
	c.shows(5*time.Second, "pods of web in eu-west")
	c.press(esc)
	c.shows(5*time.Second, "rollout of web", "state ROLLED BACK")
}

// rollBackOnCrashLoop reports the canary's instances of the new spec
// crash-looping, and waits for the driver to roll the rollout back.
func rollBackOnCrashLoop(t *testing.T, env *servertest.Env, op ctrlv1.OperatorServiceClient, id string) {
	t.Helper()
	ctx := context.Background()
	canary := env.DB.Ent.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentID(id), deploymenttopology.Region("eu-west")).OnlyX(ctx)
	hash := canary.SpecHash
	var instances []*ctrlv1.Instance
	for i := range 2 {
		instances = append(instances, &ctrlv1.Instance{PodName: fmt.Sprintf("%s-%d", id, i), Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING,
			Reason: "CrashLoopBackOff", Restarts: 3, SpecHash: hash})
	}
	if _, err := env.Agent("eu-west").ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: "eu-west",
		Deployments: []*ctrlv1.DeploymentStatus{{DeploymentId: id, Instances: instances}}}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the driver rolls back", func() bool {
		r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: id})
		return err == nil && r.Rollout.State == "rolled_back"
	})
}

// selectedLine is the screen's line in the selection's style (reverse,
// as NO_COLOR draws it).
func selectedLine(content string) string {
	for _, l := range strings.Split(content, "\n") {
		if strings.Contains(l, "\x1b[7m") {
			return ansi.Strip(l)
		}
	}
	return ""
}

// Against a real ctrld and a stand-in agent: the log of a pod follows,
// each new line appended as the agent sends it, and leaving the page
// ends the follow: ctrld's answer to the agent ends (the agent's next
// send fails), within a second.
func TestConsoleFollowsALogAndStopsWhenThePageIsLeft(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api").start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(enter) // api in eu-west: the first row
	c.shows(5*time.Second, "pods of api in eu-west", "api-0 Running")
	c.press(enter)
	c.shows(5*time.Second, "listening on :8080", "lines 1-2 of 2 · following")
	agent.follow <- "GET /healthz 200\n"
	c.shows(5*time.Second, "GET /healthz 200", "lines 1-3 of 3 · following")
	agent.follow <- "GET /api 500\nGET /api "
	c.shows(5*time.Second, "GET /api 500", "lines 1-5 of 5")
	agent.follow <- "200\n"
	c.shows(5*time.Second, "GET /api 200", "lines 1-5 of 5")
	select {
	case <-agent.followsEnded:
		t.Fatal("the follow ended while its page is shown")
	default:
	}

	c.press(press('f')) // stop following: the log is read once more, to its end
	c.shows(5*time.Second, "current run: the last 500 lines (f: follow)", "the end of the log")
	select {
	case <-agent.followsEnded:
	case <-time.After(time.Second):
		t.Fatal("the follow goes on after f stopped it")
	}

	c.press(press('f'))
	c.shows(5*time.Second, "then new ones as they come", "· following")
	agent.follow <- "again\n"
	c.shows(5*time.Second, "again")
	c.press(esc)
	c.shows(5*time.Second, "pods of api in eu-west")
	select {
	case <-agent.followsEnded:
	case <-time.After(time.Second):
		t.Fatal("the follow goes on after its page was left")
	}
}

// Against a real ctrld, with no agent in us-east: the pods, events and
// logs pages say at once that the region's agent is not connected, in
// ctrld's words, with no "ctrld unreachable" banner; ctrld is fine.
func TestConsoleSaysWhenARegionsAgentIsNotConnected(t *testing.T) {
	_, op := liveEnv(t)
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api us-east")
	const gone = "Unavailable: region us-east: its agent is not connected for live views (not running, older than live views, or started with --live-views=off)"
	for _, command := range []string{"pods api us-east", "events api us-east", "logs api us-east api-0"} {
		c.press(press(':'))
		c.press(typed(command)...)
		c.press(enter)
		got := c.shows(5*time.Second, gone)
		if strings.Contains(got, "unreachable") {
			t.Errorf(":%s: a banner says ctrld is unreachable:\n%s", command, got)
		}
	}
}

// Against a real ctrld, with an agent that takes requests and never
// answers: the pods page says it is asking, keys work meanwhile (to the
// events and back), and after ctrld's 10 s it says the agent did not
// answer.
func TestConsoleSaysWhenARegionsAgentDoesNotAnswer(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api").start(t, env, "eu-west", "api")
	agent.silent.Store(true)
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	start := time.Now()
	c.press(enter)
	c.shows(time.Second, "asking eu-west's agent for the pods of api ...")
	c.press(press('e'))
	c.shows(time.Second, "asking eu-west's agent for the events of api ...")
	c.press(esc)
	c.shows(time.Second, "pods of api in eu-west")
	c.shows(15*time.Second, "DeadlineExceeded: region eu-west: its agent did not answer within 10s")
	if took := time.Since(start); took < 9*time.Second {
		t.Errorf("the agent's silence was said after %s, before ctrld's 10 s", took)
	}
}

// Against a real ctrld, a read-only SSH session (a minted session
// credential, as the SSH server makes): it sees the pods and the events,
// and the logs page shows ctrld's refusal; the agent is never asked for
// logs.
func TestReadOnlyConsoleSeesPodsAndEventsButNotLogs(t *testing.T) {
	env, _ := liveEnv(t)
	agent := crashLooping("api").start(t, env, "eu-west", "api")
	credential, revoke := env.Server.Sessions.Mint(auth.SessionIdentity{Name: "bob", Fingerprint: "SHA256:bobkey", RemoteAddr: "203.0.113.7:50022", ReadOnly: true})
	defer revoke()
	conn, err := env.Server.DialInProcess(credential)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	c := runConsole(t, ctrlv1.NewOperatorServiceClient(conn), true)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west", "read-only")
	c.press(enter)
	c.shows(5*time.Second, "pods of api in eu-west", "api-0 Running", "l/enter logs")
	c.press(press('e'))
	c.shows(5*time.Second, "Warning BackOff Pod api-0")
	c.press(esc)
	c.shows(5*time.Second, "api-0 Running")
	c.press(press('l'))
	c.shows(5*time.Second, "log of api-0", "no lines",
		"PermissionDenied: bob's key SHA256:bobkey is read-only: it may see pods and events, not logs, which may carry secrets")
	if logs := agent.asked("logs"); len(logs) != 0 {
		t.Errorf("the agent was asked for logs by a read-only key: %v", logs)
	}
}

// Against a real ctrld and a stand-in agent: a log line of terminal
// escapes (a title, a screen clear, colours, a bidi override) reaches the
// screen as its text only.
func TestConsoleShowsALogLineOfTerminalEscapesCleaned(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api")
	agent.current = "\x1b]0;owned\x07\x1b[2J\x1b[31mboom\x1b[0m red\u202e\r\nnext\n"
	agent.start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(press(':'))
	c.press(typed("logs api eu-west api-0")...)
	c.press(enter)
	c.shows(5*time.Second, "boom red", "next", "lines 1-2 of 2")
	got := ownStyling.ReplaceAllString(c.m.Content(), "")
	if i := strings.IndexFunc(got, func(r rune) bool { return r < ' ' && r != '\n' || r >= 0x7f && r <= 0x9f || r == '\u202e' }); i >= 0 {
		t.Fatalf("control character %q at %d:\n%q", got[i:i+1], i, got)
	}
}

// Against a real ctrld and a stand-in agent: a follow of 3 MiB of log
// keeps the newest 5,000 lines, says how many older ones it dropped, and
// shows the newest.
func TestConsoleKeepsTheNewestLinesOfAHugeLog(t *testing.T) {
	env, op := liveEnv(t)
	agent := crashLooping("api")
	var b strings.Builder
	const lines = 30_000
	for i := range lines {
		fmt.Fprintf(&b, "%06d %s\n", i, strings.Repeat("x", 96))
	}
	agent.current = b.String()
	agent.start(t, env, "eu-west", "api")
	c := runConsole(t, op, false)
	c.press(tea.KeyPressMsg{Code: tea.KeyTab})
	c.shows(5*time.Second, "api eu-west")
	c.press(press(':'))
	c.press(typed("logs api eu-west api-0")...)
	c.press(enter)
	c.shows(60*time.Second, fmt.Sprintf("%06d", lines-1), "of 5000 · following",
		fmt.Sprintf("%d older lines dropped (the console keeps 5000 lines, 2 MiB)", lines-5000))
}
