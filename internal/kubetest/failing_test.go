package kubetest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/internal/kubetest"
)

// Pods whose image carries one of the failing tags fail as a kubelet's
// would: ":crashloop" Running, never ready, waiting as CrashLoopBackOff
// with its restart count rising and one address; ":badpull" Pending,
// waiting as ErrImagePull and ImagePullBackOff in turn. The tag decides,
// not the name: an image named crashloop with another tag becomes ready.
func TestPodsOfFailingImageTagsFail(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{Workloads: true})
	client := cluster.Client(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	for name, image := range map[string]string{
		"crash": "ghcr.io/acme/api:" + kubetest.CrashLoopTag,
		"pull":  "ghcr.io/acme/api:" + kubetest.BadPullTag,
		"fine":  "ghcr.io/acme/" + kubetest.CrashLoopTag + ":v1",
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
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
