package liveview_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/liveview"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/naming"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// cluster runs Pods, with kwok serving their logs through the API server.
var cluster = kubetest.Shared{Options: kubetest.Options{Workloads: true, PodLogs: true}}

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &cluster)) }

// fakeCtrld is ctrld's side of the two RPCs, on a real gRPC server (so
// that flow control is gRPC's): it sends the requests a test asks, and
// hands each answer's chunks to the test, or reads nothing of an answer
// whose id the test said never to read.
type fakeCtrld struct {
	ctrlv1.UnimplementedClusterServiceServer
	opened   chan *ctrlv1.LiveRequestsRequest
	requests chan *ctrlv1.LiveRequest

	mu      sync.Mutex
	answers map[string]chan *ctrlv1.LiveAnswerRequest
	unread  map[string]bool
}

func (f *fakeCtrld) LiveRequests(req *ctrlv1.LiveRequestsRequest, stream grpc.ServerStreamingServer[ctrlv1.LiveRequest]) error {
	select {
	case f.opened <- req:
	default:
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case r := <-f.requests:
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

func (f *fakeCtrld) LiveAnswer(stream grpc.ClientStreamingServer[ctrlv1.LiveAnswerRequest, ctrlv1.LiveAnswerResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	ch, unread := f.answer(first.GetId())
	if unread {
		<-stream.Context().Done() // a person who never reads
		return nil
	}
	for m := first; ; {
		select {
		case ch <- m:
		case <-stream.Context().Done():
			return nil
		}
		if m, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&ctrlv1.LiveAnswerResponse{})
			}
			return err
		}
	}
}

func (f *fakeCtrld) answer(id string) (chan *ctrlv1.LiveAnswerRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.answers[id]
	if !ok {
		ch = make(chan *ctrlv1.LiveAnswerRequest, 16)
		f.answers[id] = ch
	}
	return ch, f.unread[id]
}

// env is a liveview Server against the shared cluster and a fake ctrld.
type env struct {
	t       *testing.T
	ctrld   *fakeCtrld
	server  *liveview.Server
	cluster *kubetest.Cluster
	admin   kubernetes.Interface
	// ns is a namespace of the agent's.
	ns string
	// requests records the agent's API requests (method and path).
	requests *requestLog
	// opened is how the agent opened LiveRequests.
	opened *ctrlv1.LiveRequestsRequest
	seq    int
}

type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.paths = append(l.paths, r.Method+" "+r.URL.Path)
		l.mu.Unlock()
		return next.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// since returns the requests made after mark (a length of paths).
func (l *requestLog) since(mark int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths[mark:]...)
}

func (l *requestLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.paths)
}

// newEnv starts a liveview Server with cfg (Serves Logs when unset),
// reading the cluster with no more than the shipped ClusterRole allows.
func newEnv(t *testing.T, cfg liveview.Config) *env {
	t.Helper()
	c := cluster.Get(t)
	admin := c.Client(t)
	grantShippedRole(t, admin)
	e := &env{t: t, cluster: c, admin: admin, requests: &requestLog{},
		ctrld: &fakeCtrld{opened: make(chan *ctrlv1.LiveRequestsRequest, 1), requests: make(chan *ctrlv1.LiveRequest),
			answers: map[string]chan *ctrlv1.LiveAnswerRequest{}, unread: map[string]bool{}}}
	e.ns = c.NamespaceLabeled(t, map[string]string{kube.ManagedByLabel: kube.ManagedByValue})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	ctrlv1.RegisterClusterServiceServer(srv, e.ctrld)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	kcfg := c.UserConfig()
	kcfg.Wrap(e.requests.RoundTrip)
	client := kubernetes.NewForConfigOrDie(kcfg)
	reserved, err := naming.NewReserved("deploysync")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Serves == "" {
		cfg.Serves = liveview.Logs
	}
	cfg.Region, cfg.Identity = "eu", "agent-0"
	e.server, err = liveview.New(liveview.Deps{Cluster: ctrlv1.NewClusterServiceClient(conn), Kube: client,
		Reserved: reserved, Namespaces: reconcile.NewNamespaces(client, reserved), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.server.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case e.opened = <-e.ctrld.opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not open LiveRequests")
	}
	return e
}

var grantOnce sync.Once

// grantShippedRole binds deploy/k8s/agentd.yaml's ClusterRole to
// kubetest.LimitedUser, as whom the agent reads.
func grantShippedRole(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	var err error
	grantOnce.Do(func() {
		var rules []rbacv1.PolicyRule
		if rules, err = shippedClusterRules(); err != nil {
			return
		}
		ctx := context.Background()
		if _, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "shipped-agentd"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			return
		}
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shipped-agentd"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "shipped-agentd"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.LimitedUser}}}, metav1.CreateOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func shippedClusterRules() ([]rbacv1.PolicyRule, error) {
	f, err := os.Open("../../deploy/k8s/agentd.yaml")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			return nil, err
		}
		if obj.GetKind() == "ClusterRole" {
			var role rbacv1.ClusterRole
			err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role)
			return role.Rules, err
		}
	}
}

// answer is what the fake ctrld got of one answer.
type answer struct {
	chunks    []*ctrlv1.LiveAnswerRequest
	pods      []*ctrlv1.LivePod
	events    []*ctrlv1.LiveEvent
	log       strings.Builder
	err       string
	done      bool
	truncated bool
	took      time.Duration
}

// send asks the agent req (given an id) and returns the id.
func (e *env) send(req *ctrlv1.LiveRequest) string {
	e.t.Helper()
	e.seq++
	req.Id = fmt.Sprintf("%s-%d", e.t.Name(), e.seq)
	select {
	case e.ctrld.requests <- req:
	case <-time.After(10 * time.Second):
		e.t.Fatal("the agent takes no request")
	}
	return req.Id
}

// neverRead makes the fake ctrld read nothing of the answer id.
func (e *env) neverRead(id string) {
	e.ctrld.mu.Lock()
	defer e.ctrld.mu.Unlock()
	e.ctrld.unread[id] = true
}

// nextID is the id send gives the next request.
func (e *env) nextID() string {
	return fmt.Sprintf("%s-%d", e.t.Name(), e.seq+1)
}

// ask sends req and waits (up to limit) for its whole answer.
func (e *env) ask(req *ctrlv1.LiveRequest, limit time.Duration) *answer {
	e.t.Helper()
	start := time.Now()
	id := e.send(req)
	a := e.read(id, limit, func(*answer) bool { return false })
	a.took = time.Since(start)
	return a
}

// read gathers id's answer until it ends or enough says so.
func (e *env) read(id string, limit time.Duration, enough func(*answer) bool) *answer {
	e.t.Helper()
	ch, _ := e.ctrld.answer(id)
	a := &answer{}
	deadline := time.After(limit)
	for {
		select {
		case m := <-ch:
			if m.GetId() != id {
				e.t.Fatalf("a chunk of answer %q carries id %q", id, m.GetId())
			}
			a.chunks = append(a.chunks, m)
			a.pods = append(a.pods, m.GetPods()...)
			a.events = append(a.events, m.GetEvents()...)
			a.log.WriteString(m.GetLog())
			a.truncated = a.truncated || m.GetTruncated()
			if len(m.GetLog()) > liveview.ChunkBytes {
				e.t.Errorf("a chunk of %d bytes of log", len(m.GetLog()))
			}
			if m.GetError() != "" || m.GetDone() {
				a.err, a.done = m.GetError(), m.GetDone()
				return a
			}
			if enough(a) {
				return a
			}
		case <-deadline:
			e.t.Fatalf("answer %s: not whole after %v (so far: %d chunks, %d bytes of log, %q)", id, limit, len(a.chunks), a.log.Len(), clip(a.log.String()))
			return nil
		}
	}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// deployment creates what the agent would apply for a deployment: a
// headless Service and a StatefulSet of its image, labeled as the
// agent's with the deployment's ID and a spec hash, and waits until its
// Pods run.
func (e *env) deployment(ns, id, image string, replicas int32) {
	e.t.Helper()
	ctx := context.Background()
	labels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id}
	podLabels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id, kube.SpecHashLabel: "hash-" + id, "app": id}
	if _, err := e.admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": id},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, ServiceName: id, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": id}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitPods(ns, "app="+id, int(replicas))
}

// waitPods waits until n Pods of selector run on the fake node.
func (e *env) waitPods(ns, selector string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods, err := e.admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		running := 0
		if err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		if running >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d of %d pods of %s running after 60s (%v)", running, n, selector, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pod creates a bare Pod on the fake node and waits until it runs.
func (e *env) pod(ns, name string, labels map[string]string) {
	e.t.Helper()
	l := map[string]string{"bare": name}
	for k, v := range labels {
		l[k] = v
	}
	if _, err := e.admin.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: corev1.PodSpec{NodeName: kubetest.FakeNodeName, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		e.admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
	e.waitPods(ns, "bare="+name, 1)
}
