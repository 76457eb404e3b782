package kubetest

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Pod logs (Options.PodLogs). kwok plays the kubelet's log endpoint: the
// API server's pods/log asks the node's kubelet port (the fake node's
// InternalIP, 127.0.0.1, and the daemon endpoint kwok gives it), kwok's
// server answers from files in the CRI log format, named by its Logs
// objects (one per Pod, created by ServePodLogs) or, for every other Pod,
// by one ClusterLogs of its configuration: the default logs below.
//
// The default logs are the same for every Pod's containers: the current
// run's DefaultLogLine, and as the previous run (kubectl logs --previous)
// a crash whose line is CrashLogLine, as a crash-looping image's would be.
// kwok does not know whether a container restarted: it serves the previous
// file for any Pod.
const (
	DefaultLogLine = "listening on :8080"
	CrashLogLine   = "panic: DATABASE_URL is not set"
)

// defaultLogs and crashLogs are the default files' lines.
var (
	defaultLogs = []string{"starting", DefaultLogLine}
	crashLogs   = []string{"starting", CrashLogLine, "", "goroutine 1 [running]:", "main.main()", "\t/app/main.go:12 +0x1d"}
)

// logsCRD is kwok's Logs CRD (kustomize/crd/bases/kwok.x-k8s.io_logs.yaml
// of the kwok tools/kube builds), which kwok watches with --enable-crds=Logs.
//
//go:embed kwok-logs-crd.yaml
var logsCRD []byte

var logsResource = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}

// CRILine is one line of a container log file in the CRI format a kubelet
// reads (and kwok serves): a timestamp, the stream, a full-line tag, the
// text and a line feed.
func CRILine(stream, text string) string {
	return time.Now().UTC().Format(time.RFC3339Nano) + " " + stream + " F " + text + "\n"
}

// podLogsArgs prepares what kwok needs to serve logs (the default files,
// its ClusterLogs, the Logs CRD) and returns its extra arguments.
func (c *Cluster) podLogsArgs(ctx context.Context, port int) ([]string, error) {
	dir := filepath.Join(c.Dir, "pod-logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	current, previous := filepath.Join(dir, "default-current.log"), filepath.Join(dir, "default-previous.log")
	if err := writeCRI(current, defaultLogs); err != nil {
		return nil, err
	}
	if err := writeCRI(previous, crashLogs); err != nil {
		return nil, err
	}
	config := filepath.Join(c.Dir, "kwok-cluster-logs.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: deploysync-default-logs
spec:
  logs:
  - logsFile: %q
    previousLogsFile: %q
`, current, previous), 0o644); err != nil {
		return nil, err
	}
	if err := c.installLogsCRD(ctx); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return []string{
		"--config=" + config,
		"--enable-crds=Logs",
		"--server-address=" + addr,
		"--node-port=" + fmt.Sprint(port),
	}, nil
}

func writeCRI(path string, lines []string) error {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(CRILine("stdout", l))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// installLogsCRD creates kwok's Logs CRD and waits until it is served, so
// that kwok's watch of it starts at once.
func (c *Cluster) installLogsCRD(ctx context.Context) error {
	var obj unstructured.Unstructured
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(logsCRD), 4096).Decode(&obj.Object); err != nil {
		return fmt.Errorf("kubetest: kwok's Logs CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, &obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubetest: create kwok's Logs CRD: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := dyn.Resource(logsResource).List(ctx, metav1.ListOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kwok's Logs CRD not served after 15s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PodLogFiles are the files kwok serves one Pod's logs from (see
// ServePodLogs): write CRILine lines to them; a follow sees what is
// appended to Current.
type PodLogFiles struct {
	Current, Previous string
}

// ServePodLogs has kwok serve the logs of every container of the Pod
// namespace/name, which must run on the fake node, from two files of its
// own, empty to begin with, and returns them once the API server's
// pods/log reads them. It needs Options.PodLogs.
func (c *Cluster) ServePodLogs(t testing.TB, namespace, name string) PodLogFiles {
	t.Helper()
	if !c.podLogs {
		t.Fatal("kubetest: ServePodLogs needs Options.PodLogs")
	}
	dir := t.TempDir()
	files := PodLogFiles{Current: filepath.Join(dir, "current.log"), Previous: filepath.Join(dir, "previous.log")}
	marker := "kubetest: the logs of " + namespace + "/" + name
	if err := writeCRI(files.Current, []string{marker}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Previous, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Logs",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"logs": []any{map[string]any{
			"logsFile": files.Current, "previousLogsFile": files.Previous, "follow": true,
		}}},
	}}
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(logsResource).Namespace(namespace).Create(ctx, logs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: create kwok Logs for %s/%s: %v", namespace, name, err)
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := readPodLog(ctx, client, namespace, name)
		if err == nil && strings.Contains(got, marker) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: the API server does not serve kwok's logs of %s/%s after 30s: %q, %v", namespace, name, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(files.Current, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return files
}

// readPodLog reads the Pod's first container's log through the API server.
func readPodLog(ctx context.Context, client kubernetes.Interface, namespace, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return string(b), err
}
