package liveview_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/liveview"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A crash-looping image's last run's log line comes back through the
// loop: asked for the previous container's log, the agent reads it from
// the API server (kwok as the kubelet) and sends it, cleaned, then done.
func TestCrashLoopingPodsPreviousLogComesBack(t *testing.T) {
	e := newEnv(t, liveview.Config{})
	e.deployment(e.ns, "api", "app:"+kubetest.CrashLoopTag, 1)
	waitRestarted(t, e, e.ns, "api-0")

	a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "api-0", Previous: true, TailLines: 50}, 20*time.Second)
	if a.err != "" || !a.done {
		t.Fatalf("previous log: error %q, done %v", a.err, a.done)
	}
	if !strings.Contains(a.log.String(), kubetest.CrashLogLine) {
		t.Fatalf("the previous run's log lacks %q: %q", kubetest.CrashLogLine, a.log.String())
	}
	if strings.Contains(a.log.String(), kubetest.DefaultLogLine) {
		t.Errorf("the current run's log came instead of the previous one's: %q", a.log.String())
	}
	if a.truncated {
		t.Error("a short log came truncated")
	}
}

func waitRestarted(t *testing.T, e *env, ns, pod string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := e.admin.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s has not restarted after 30s", pod)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The Pods view shows the deployment's Pods and only those, as the status
// reports see them; the events view the events the controller manager
// and the scheduler wrote of its Pods and StatefulSet, newest last, and
// none of another deployment's objects in the same namespace.
func TestPodsAndEventsOfTheDeployment(t *testing.T) {
	e := newEnv(t, liveview.Config{})
	e.deployment(e.ns, "api", "app:"+kubetest.CrashLoopTag, 2)
	e.deployment(e.ns, "other", "app:1", 1)
	waitRestarted(t, e, e.ns, "api-0")

	a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: e.ns, DeploymentId: "api"}, 15*time.Second)
	if a.err != "" || !a.done {
		t.Fatalf("pods: error %q, done %v", a.err, a.done)
	}
	var names []string
	for _, p := range a.pods {
		names = append(names, p.GetName())
	}
	if !slices.Equal(names, []string{"api-0", "api-1"}) {
		t.Fatalf("pods view lists %v, want api-0 and api-1", names)
	}
	p := a.pods[0]
	if p.GetPhase() != "Running" || p.GetReady() || p.GetRestarts() < 1 || p.GetWhy() != "CrashLoopBackOff" ||
		p.GetSpecHash() != "hash-api" || p.GetNode() != kubetest.FakeNodeName || p.GetCreatedAt().AsTime().IsZero() {
		t.Errorf("api-0 shown as %v", p)
	}
	if len(p.GetContainers()) != 1 {
		t.Fatalf("api-0's containers: %v", p.GetContainers())
	}
	if c := p.GetContainers()[0]; c.GetName() != "app" || c.GetState() != "waiting" || c.GetReason() != "CrashLoopBackOff" ||
		c.GetLastExit() != "Error (exit code 1)" || c.GetRestarts() < 1 {
		t.Errorf("api-0's container shown as %v", c)
	}

	want := map[string]bool{"Pod api-0 Scheduled": false, "Pod api-1 Scheduled": false, "StatefulSet api SuccessfulCreate": false}
	deadline := time.Now().Add(20 * time.Second)
	for {
		a = e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindEvents, Namespace: e.ns, DeploymentId: "api"}, 15*time.Second)
		if a.err != "" || !a.done {
			t.Fatalf("events: error %q, done %v", a.err, a.done)
		}
		for _, ev := range a.events {
			if strings.Contains(ev.GetObject(), "other") || strings.Contains(ev.GetMessage(), "other-0") {
				t.Fatalf("another deployment's event shown: %v", ev)
			}
			if _, ok := want[ev.GetObject()+" "+ev.GetReason()]; ok {
				want[ev.GetObject()+" "+ev.GetReason()] = true
			}
		}
		missing := false
		for _, seen := range want {
			missing = missing || !seen
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events of the deployment: want %v, got %v", want, a.events)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !slices.IsSortedFunc(a.events, func(x, y *ctrlv1.LiveEvent) int { return x.GetLastSeen().AsTime().Compare(y.GetLastSeen().AsTime()) }) {
		t.Error("events not oldest first")
	}
	for _, ev := range a.events {
		if ev.GetType() == "" || ev.GetMessage() == "" || ev.GetCount() < 1 || ev.GetLastSeen().AsTime().IsZero() {
			t.Errorf("event shown without its particulars: %v", ev)
		}
	}
}

// The agent refuses what it does not manage, whatever ctrld asks: a Pod in
// kube-system (labeled as the agent's, even), one in a namespace that is
// not the agent's, one without the managed-by label, one of another
// deployment. Each gets an error answer, and nothing else is read: no
// log, and nothing at all in a reserved namespace.
func TestRefusesWhatItDoesNotManage(t *testing.T) {
	e := newEnv(t, liveview.Config{})
	managed := func(id string) map[string]string {
		return map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id}
	}
	foreign := e.cluster.Namespace(t) // exists, not labeled as the agent's
	e.pod("kube-system", "api-0", managed("api"))
	e.pod(foreign, "api-0", managed("api"))
	e.pod(e.ns, "unmanaged-0", map[string]string{kube.DeploymentLabel: "api"})
	e.pod(e.ns, "theirs-0", managed("theirs"))

	for _, tc := range []struct {
		name     string
		req      *ctrlv1.LiveRequest
		want     string
		readNone bool
	}{
		{"logs in kube-system", &ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: "kube-system", DeploymentId: "api", Pod: "api-0"}, "reserved", true},
		{"pods in kube-system", &ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: "kube-system", DeploymentId: "api"}, "reserved", true},
		{"events in kube-system", &ctrlv1.LiveRequest{Kind: liveview.KindEvents, Namespace: "kube-system", DeploymentId: "api"}, "reserved", true},
		{"logs in a namespace not the agent's", &ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: foreign, DeploymentId: "api", Pod: "api-0"}, "not the agent's", false},
		{"pods in a namespace not the agent's", &ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: foreign, DeploymentId: "api"}, "not the agent's", false},
		{"logs of an unmanaged pod", &ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "unmanaged-0"}, "not one the agent manages", false},
		{"logs of another deployment's pod", &ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "theirs-0"}, "not one the agent manages", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := e.requests.mark()
			a := e.ask(tc.req, 15*time.Second)
			if !strings.Contains(a.err, "refused") || !strings.Contains(a.err, tc.want) {
				t.Errorf("answer: error %q, done %v, %d pods, %d events, %d bytes of log; want a refusal saying %q", a.err, a.done, len(a.pods), len(a.events), a.log.Len(), tc.want)
			}
			if len(a.pods) != 0 || len(a.events) != 0 || a.log.Len() != 0 {
				t.Errorf("a refusal carried %d pods, %d events, %q", len(a.pods), len(a.events), a.log.String())
			}
			for _, r := range e.requests.since(mark) {
				if strings.HasSuffix(r, "/log") || (tc.readNone) || strings.Contains(r, "/events") {
					t.Errorf("refused, the agent still read %s", r)
				}
			}
		})
	}
	// What it manages, it serves: the same agent and RBAC.
	if a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: e.ns, DeploymentId: "theirs"}, 15*time.Second); a.err != "" || len(a.pods) != 1 {
		t.Errorf("the deployment's own pods: error %q, %d pods", a.err, len(a.pods))
	}
}

// --live-views=pods: the agent says so when it opens LiveRequests, serves
// Pods, and refuses logs without reading any.
func TestPodsOnlyRefusesLogs(t *testing.T) {
	e := newEnv(t, liveview.Config{Serves: liveview.Pods})
	e.deployment(e.ns, "api", "app:1", 1)
	mark := e.requests.mark()
	a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "api-0"}, 15*time.Second)
	if !strings.Contains(a.err, "not served") || !strings.Contains(a.err, "--live-views=pods") || a.log.Len() != 0 {
		t.Errorf("logs with --live-views=pods: error %q, log %q", a.err, a.log.String())
	}
	if got := e.requests.since(mark); len(got) != 0 {
		t.Errorf("refused, the agent still read %v", got)
	}
	if a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: e.ns, DeploymentId: "api"}, 15*time.Second); a.err != "" || len(a.pods) != 1 {
		t.Errorf("pods with --live-views=pods: error %q, %d pods", a.err, len(a.pods))
	}
}

// The agent tells ctrld what it serves when it opens the stream.
func TestLiveRequestsSaysWhatItServes(t *testing.T) {
	for _, serves := range []liveview.Serves{liveview.Pods, liveview.Logs} {
		e := newEnv(t, liveview.Config{Serves: serves})
		if e.opened.GetServes() != string(serves) || e.opened.GetRegion() != "eu" || e.opened.GetAgentIdentity() != "agent-0" {
			t.Errorf("LiveRequests opened with %v, want serves %s", e.opened, serves)
		}
	}
}

// A log larger than the cap (100 MiB against 1 MiB) stops at the cap with
// truncated, in chunks of at most 64 KiB; and so does one at the smaller
// limit ctrld asks.
func TestALogStopsAtTheCap(t *testing.T) {
	e := newEnv(t, liveview.Config{})
	e.deployment(e.ns, "big", "app:1", 1)
	files := e.cluster.ServePodLogs(t, e.ns, "big-0")
	f, err := os.Create(files.Current)
	if err != nil {
		t.Fatal(err)
	}
	line := kubetest.CRILine("stdout", strings.Repeat("0123456789abcdef", 62)) // about 1 KiB
	block := strings.Repeat(line, 1024)
	for written := 0; written < 100<<20; written += len(block) {
		if _, err := f.WriteString(block); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	for _, tc := range []struct {
		limit int64
		want  int64
	}{{0, liveview.DefaultMaxLogBytes}, {10 << 20, liveview.DefaultMaxLogBytes}, {100 << 10, 100 << 10}} {
		before := e.server.LogBytesRead()
		a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "big", Pod: "big-0", LimitBytes: tc.limit}, 30*time.Second)
		if a.err != "" || !a.done || !a.truncated {
			t.Fatalf("limit %d: error %q, done %v, truncated %v", tc.limit, a.err, a.done, a.truncated)
		}
		if n := int64(a.log.Len()); n > tc.want || n < tc.want-int64(len(line)) {
			t.Errorf("limit %d: %d bytes of log, want the cap, %d", tc.limit, n, tc.want)
		}
		if n := e.server.LogBytesRead() - before; n > tc.want+1 {
			t.Errorf("limit %d: read %d bytes of the log from the API server", tc.limit, n)
		}
	}
	// A log within the limit is whole, not truncated.
	a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "big", Pod: "big-0", TailLines: 3}, 30*time.Second)
	if a.err != "" || !a.done || a.truncated || strings.Count(a.log.String(), "\n") != 3 {
		t.Errorf("3 lines: error %q, done %v, truncated %v, %d lines", a.err, a.done, a.truncated, strings.Count(a.log.String(), "\n"))
	}
}

// A log line of terminal escapes arrives cleaned: no escape sequence, no
// control character, valid UTF-8, the text between kept.
func TestALineOfEscapesArrivesCleaned(t *testing.T) {
	e := newEnv(t, liveview.Config{})
	e.deployment(e.ns, "esc", "app:1", 1)
	files := e.cluster.ServePodLogs(t, e.ns, "esc-0")
	hostile := "\x1b]0;owned\x07\x1b[2J\x1b[H\x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07clip\x1bPq\x1b\\ \u009b31mc1\r\bok \xff"
	if err := os.WriteFile(files.Current, []byte(kubetest.CRILine("stdout", hostile)+kubetest.CRILine("stderr", "\x1b[1mnext\x1b[m")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := e.ask(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "esc", Pod: "esc-0"}, 15*time.Second)
	if a.err != "" || !a.done {
		t.Fatalf("error %q, done %v", a.err, a.done)
	}
	if got, want := a.log.String(), "red clip c1ok \uFFFD\nnext\n"; got != want {
		t.Errorf("log arrived as %q, want %q", got, want)
	}
}

// A follow whose reader never reads stays bounded: the agent's Send
// blocks, and with it its reads from the API server, while the log grows
// by 64 MiB (the cap raised out of the way); its memory does not grow
// with the log, and the stall timeout ends the answer, freeing its place.
func TestAFollowNobodyReadsStaysBounded(t *testing.T) {
	e := newEnv(t, liveview.Config{MaxLogBytes: 1 << 30, StallTimeout: 8 * time.Second, MaxFollows: 1})
	e.deployment(e.ns, "chatty", "app:1", 1)
	files := e.cluster.ServePodLogs(t, e.ns, "chatty-0")
	id := e.nextID()
	e.neverRead(id)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	readBefore := e.server.LogBytesRead()
	e.send(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "chatty", Pod: "chatty-0", Follow: true})

	f, err := os.OpenFile(files.Current, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	block := strings.Repeat(kubetest.CRILine("stdout", strings.Repeat("x", 1000)), 1024)
	const total = 64 << 20
	for written := 0; written < total; written += len(block) {
		if _, err := f.WriteString(block); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Close()
	time.Sleep(2 * time.Second) // for the agent to read all it would

	read := e.server.LogBytesRead() - readBefore
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("log written %d MiB, read by the agent %d KiB, heap grown %d KiB", total>>20, read>>10, grown>>10)
	if read > 4<<20 {
		t.Errorf("with nobody reading, the agent read %d KiB of the log: it buffers what it cannot send", read>>10)
	}
	if grown > 32<<20 {
		t.Errorf("with nobody reading, the agent's heap grew by %d KiB", grown>>10)
	}
	// The stall ends the answer: its follow's place is free again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		id := e.send(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "chatty", Pod: "chatty-0", Follow: true, TailLines: 1})
		a := e.read(id, 20*time.Second, func(a *answer) bool { return a.log.Len() > 0 })
		if a.err == "" {
			break
		}
		if !strings.Contains(a.err, "busy") || time.Now().After(deadline) {
			t.Fatalf("a follow after the stalled one: %q", a.err)
		}
		time.Sleep(time.Second)
	}
}

// A flood of requests beyond the bound gets busy answers at once, while
// the answers in progress go on: at most MaxAnswers at once, of which
// MaxFollows follow.
func TestAFloodGetsBusyAtOnce(t *testing.T) {
	e := newEnv(t, liveview.Config{MaxAnswers: 3, MaxFollows: 2})
	e.deployment(e.ns, "api", "app:1", 2)
	files := e.cluster.ServePodLogs(t, e.ns, "api-0")
	follow := &ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "api-0", Follow: true}
	var held []string
	for range 2 {
		id := e.send(follow)
		e.read(id, 15*time.Second, func(a *answer) bool { return len(a.chunks) > 0 }) // begun
		held = append(held, id)
	}
	a := e.ask(follow, 5*time.Second)
	if !strings.Contains(a.err, "busy") || !strings.Contains(a.err, "logs followed") {
		t.Errorf("a third follow: %q", a.err)
	}
	// A third answer in progress: a large log nobody reads.
	big := e.cluster.ServePodLogs(t, e.ns, "api-1")
	if err := os.WriteFile(big.Current, []byte(strings.Repeat(kubetest.CRILine("stdout", strings.Repeat("y", 1000)), 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	stuck := e.nextID()
	e.neverRead(stuck)
	e.send(&ctrlv1.LiveRequest{Kind: liveview.KindLogs, Namespace: e.ns, DeploymentId: "api", Pod: "api-1", LimitBytes: 4 << 20})
	time.Sleep(time.Second)

	start := time.Now()
	var ids []string
	for range 50 {
		ids = append(ids, e.send(&ctrlv1.LiveRequest{Kind: liveview.KindPods, Namespace: e.ns, DeploymentId: "api"}))
	}
	for _, id := range ids {
		a := e.read(id, 10*time.Second, func(*answer) bool { return false })
		if !strings.HasPrefix(a.err, "busy:") || !strings.Contains(a.err, "at most 3") {
			t.Fatalf("request %s of the flood: error %q, %d pods", id, a.err, len(a.pods))
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("50 busy answers took %v", took)
	}
	// The follows in progress go on.
	f, err := os.OpenFile(files.Current, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(kubetest.CRILine("stdout", "still following"))
	for _, id := range held {
		e.read(id, 15*time.Second, func(a *answer) bool { return strings.Contains(a.log.String(), "still following") })
	}
}
