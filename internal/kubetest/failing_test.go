package kubetest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/kubetest"
)

// Pods whose image carries one of the failing tags fail as a kubelet's
// would. One control plane serves both halves, run side by side.
func TestPodsOfFailingImageTagsFail(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{Workloads: true})
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		testFailingAtOnce(t, cluster)
	})
	t.Run("after being ready", func(t *testing.T) {
		t.Parallel()
		testFailingLater(t, cluster)
	})
}

// ":crashloop" Running, never ready, waiting as CrashLoopBackOff with its
// restart count rising and one address; ":badpull" Pending, waiting as
// ErrImagePull and ImagePullBackOff in turn. The tag decides, not the
// name: an image named crashloop with another tag becomes ready.
func testFailingAtOnce(t *testing.T, cluster *kubetest.Cluster) {
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	for name, image := range map[string]string{
		"crash": "ghcr.io/acme/api:" + kubetest.CrashLoopTag,
		"pull":  "ghcr.io/acme/api:" + kubetest.BadPullTag,
		"fine":  "ghcr.io/acme/" + kubetest.CrashLoopTag + ":v1",
	} {
		createPod(t, client, ns, name, image, nil)
	}
	waiting := func(p *corev1.Pod) string {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return ""
		}
		return p.Status.ContainerStatuses[0].State.Waiting.Reason
	}
	var crashRestarts []int32
	seenPull := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		crash, pull, fine := byName["crash"], byName["pull"], byName["fine"]
		if crash.Status.Phase == corev1.PodRunning && waiting(crash) == "CrashLoopBackOff" {
			if readyPods([]corev1.Pod{*crash}) != 0 {
				t.Fatalf("the crash-looping Pod is ready: %+v", crash.Status)
			}
			if len(crash.Status.PodIPs) != 1 {
				t.Fatalf("the crash-looping Pod has addresses %v, want one", crash.Status.PodIPs)
			}
			if n := crash.Status.ContainerStatuses[0].RestartCount; len(crashRestarts) == 0 || crashRestarts[len(crashRestarts)-1] != n {
				crashRestarts = append(crashRestarts, n)
			}
		}
		if pull.Status.Phase == corev1.PodPending && waiting(pull) != "" {
			seenPull[waiting(pull)] = true
		}
		fineReady := fine.Status.Phase == corev1.PodRunning && readyPods([]corev1.Pod{*fine}) == 1
		if len(crashRestarts) >= 3 && seenPull["ErrImagePull"] && seenPull["ImagePullBackOff"] && fineReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: crash-loop restart counts seen %v, pull reasons seen %v, the other image ready: %v; crash %+v; pull %+v",
				crashRestarts, seenPull, fineReady, crash.Status, pull.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 1; i < len(crashRestarts); i++ {
		if crashRestarts[i] <= crashRestarts[i-1] {
			t.Errorf("restart counts %v do not rise", crashRestarts)
		}
	}
}

// ":crashonce" and ":crashlater" are ready first. Then ":crashonce" dies
// once (not ready, restart count 1, its last run terminated with reason
// Error and exit code 1, running again) and is ready again, keeping that
// count and last state, for good; ":crashlater" crash-loops, its restart
// count rising, never ready again. The one is given its delay in
// kubetest.CrashAfterEnv, the other runs on kubetest.CrashAfter. The
// order is what the API server's watch reports; the delays are logged,
// not asserted.
func testFailingLater(t *testing.T, cluster *kubetest.Cluster) {
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	createPod(t, client, ns, "once", "ghcr.io/acme/api:"+kubetest.CrashOnceTag, map[string]string{kubetest.CrashAfterEnv: "2s"})
	createPod(t, client, ns, "later", "ghcr.io/acme/api:"+kubetest.CrashLaterTag, nil)

	// Each Pod's states in the order seen, repeats dropped, with when each
	// was first seen.
	type seen struct {
		state string
		at    time.Time
	}
	states := map[string][]seen{}
	note := func(p *corev1.Pod) {
		s := laterState(p)
		if got := states[p.Name]; s != "" && (len(got) == 0 || got[len(got)-1].state != s) {
			states[p.Name] = append(got, seen{s, time.Now()})
		}
	}
	show := func() string {
		var b strings.Builder
		for _, name := range []string{"once", "later"} {
			fmt.Fprintf(&b, "\n  %s:", name)
			for _, s := range states[name] {
				fmt.Fprintf(&b, " → %s", s.state)
			}
		}
		return b.String()
	}
	crashLooped := func() int {
		n := 0
		for _, s := range states["later"] {
			if strings.HasPrefix(s.state, "crash-looping") {
				n++
			}
		}
		return n
	}
	for !(len(states["once"]) >= 3 && crashLooped() >= 3) {
		select {
		case <-ctx.Done():
			t.Fatalf("after 90s the Pods went through:%s", show())
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended; the Pods went through:%s", show())
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type != watch.Deleted {
				note(p)
			}
		}
	}
	t.Logf("the Pods went through:%s", show())
	once := states["once"]
	want := []string{"ready", "died once, running, not ready", "ready again, restart count 1"}
	for i, s := range once {
		if i >= len(want) || s.state != want[i] {
			t.Fatalf(":%s went through:%s\nwant %q", kubetest.CrashOnceTag, show(), want)
		}
	}
	t.Logf(":%s died %s after it was ready (%s asked), and was ready again %s later", kubetest.CrashOnceTag,
		once[1].at.Sub(once[0].at).Round(time.Millisecond), "2s", once[2].at.Sub(once[1].at).Round(time.Millisecond))
	later := states["later"]
	if later[0].state != "ready" {
		t.Fatalf(":%s was not ready first:%s", kubetest.CrashLaterTag, show())
	}
	for i, s := range later[1:] {
		if s.state != fmt.Sprintf("crash-looping, restart count %d", i+1) {
			t.Fatalf(":%s went through:%s\nwant ready, then crash-looping with restart counts 1, 2, 3, ...", kubetest.CrashLaterTag, show())
		}
	}
	t.Logf(":%s crash-looped %s after it was ready (%s by default)", kubetest.CrashLaterTag,
		later[1].at.Sub(later[0].at).Round(time.Millisecond), kubetest.CrashAfter)
}

// laterState names what matters of a Pod of the later-failing tags, ""
// before kwok first reports on it (or for what no stage makes).
func laterState(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) != 1 || p.Status.Phase != corev1.PodRunning {
		return ""
	}
	c := p.Status.ContainerStatuses[0]
	ready := readyPods([]corev1.Pod{*p}) == 1
	if ready != c.Ready {
		return fmt.Sprintf("the Pod's Ready %v, its container's %v", ready, c.Ready)
	}
	died := c.LastTerminationState.Terminated != nil && c.LastTerminationState.Terminated.Reason == "Error" &&
		c.LastTerminationState.Terminated.ExitCode == 1
	switch {
	case ready && c.RestartCount == 0 && c.State.Running != nil && c.LastTerminationState.Terminated == nil:
		return "ready"
	case !ready && c.RestartCount == 1 && died && c.State.Running != nil:
		return "died once, running, not ready"
	case ready && c.RestartCount == 1 && died && c.State.Running != nil:
		return "ready again, restart count 1"
	case !ready && died && c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff":
		return fmt.Sprintf("crash-looping, restart count %d", c.RestartCount)
	}
	return fmt.Sprintf("unexpected: ready %v, restart count %d, state %+v, last state %+v", ready, c.RestartCount, c.State, c.LastTerminationState)
}

func createPod(t *testing.T, client kubernetes.Interface, ns, name, image string, env map[string]string) {
	t.Helper()
	ctr := corev1.Container{Name: "app", Image: image}
	for k, v := range env {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: v})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
