package kubetest_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/kubetest"
)

// With PodLogs, the API server's pods/log reaches kwok as it would a
// kubelet: every Pod has the default logs (its previous run's crash line
// included), a Pod given files of its own serves those, and a follow sees
// lines appended to them.
func TestPodLogsThroughTheAPIServer(t *testing.T) {
	start := time.Now()
	c := kubetest.StartForTest(t, kubetest.Options{Workloads: true, PodLogs: true})
	t.Logf("control plane with pod logs up in %v", time.Since(start).Round(time.Millisecond))
	client := c.Client(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	for _, name := range []string{"default-logs", "own-logs"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: kubetest.FakeNodeName, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	logs := func(pod string, opts *corev1.PodLogOptions) string {
		t.Helper()
		var got string
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if got, err = readLogs(ctx, client, ns, pod, opts); err == nil {
				return got
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("logs of %s: %v", pod, err)
		return ""
	}
	if got := logs("default-logs", &corev1.PodLogOptions{}); !strings.Contains(got, kubetest.DefaultLogLine) {
		t.Errorf("default logs: %q", got)
	}
	if got := logs("default-logs", &corev1.PodLogOptions{Previous: true}); !strings.Contains(got, kubetest.CrashLogLine) {
		t.Errorf("default previous logs: %q", got)
	}

	files := c.ServePodLogs(t, ns, "own-logs")
	if err := os.WriteFile(files.Previous, []byte(kubetest.CRILine("stderr", "the previous run")), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := logs("own-logs", &corev1.PodLogOptions{Previous: true}); got != "the previous run\n" {
		t.Errorf("own previous logs: %q", got)
	}
	// The API server answers a follow once kwok wrote its first line, as
	// a kubelet does: the line is appended while the call waits.
	f, err := os.OpenFile(files.Current, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	go func() {
		time.Sleep(time.Second)
		f.WriteString(kubetest.CRILine("stdout", "appended"))
	}()
	followCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := client.CoreV1().Pods(ns).GetLogs("own-logs", &corev1.PodLogOptions{Follow: true}).Stream(followCtx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || line != "appended\n" {
		t.Fatalf("follow read %q, %v", line, err)
	}
}

func readLogs(ctx context.Context, client kubernetes.Interface, ns, pod string, opts *corev1.PodLogOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := client.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}
