package kubetest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/deploysync/deploysync/internal/ci"
	"github.com/deploysync/deploysync/internal/testproc"
)

// EnvBinDir names the environment variable that points at the built
// binaries; the test task sets it from scripts/kube-binaries.sh.
const EnvBinDir = "DEPLOYSYNC_KUBE_BIN"

// LimitedUser is a user with no permissions but those a test grants it
// with RBAC (see UserConfig).
const LimitedUser = "limited-user"

// NodeMonitorGrace is how long the fake node's heartbeat may be missing
// before the controller manager marks its Pods NotReady (workload mode).
const NodeMonitorGrace = 20 * time.Second

// FakeNodeName is the kwok node Pods are scheduled onto in workload mode.
const FakeNodeName = "kwok-node-0"

// Image tags that make kwok fail a Pod in workload mode (the stages in
// kwok-failing-stages.yaml), whatever the image's name: a container image
// ending in ":"+CrashLoopTag crash-loops (Running, never ready, waiting as
// CrashLoopBackOff, its restart count rising about every second), one
// ending in ":"+BadPullTag stays Pending, waiting as ErrImagePull and
// ImagePullBackOff in turn. Two fail only after they were ready for
// CrashAfter (or the duration in the container's CrashAfterEnv): one
// ending in ":"+CrashOnceTag dies once (not ready, restart count 1, its
// last run terminated with reason Error and exit code 1) and is ready
// again about a second later, for good; one ending in ":"+CrashLaterTag
// then crash-loops as CrashLoopTag does. Every other image becomes ready.
const (
	CrashLoopTag  = "crashloop"
	BadPullTag    = "badpull"
	CrashOnceTag  = "crashonce"
	CrashLaterTag = "crashlater"
)

// CrashAfterEnv names the environment variable (a Go duration, e.g.
// "10s") that sets how long a CrashOnceTag or CrashLaterTag Pod is ready
// before its first crash, counted from when kwok made it ready; CrashAfter
// without it. A value that is no duration crashes it at once.
const CrashAfterEnv = "KWOK_CRASH_AFTER"

// CrashAfter is how long a CrashOnceTag or CrashLaterTag Pod is ready
// before its first crash when its container has no CrashAfterEnv.
const CrashAfter = 3 * time.Second

// failingStages are kwok's stages for the failing tags above. They
// are kept here, beside the tests that use them, rather than in the stage
// file scripts/kube-binaries.sh builds into its cache, whose key a change
// to that script would change (a cold build of every binary).
//
//go:embed kwok-failing-stages.yaml
var failingStages []byte

// Options selects what runs besides etcd and the apiserver.
type Options struct {
	// Workloads also starts the controller manager, the scheduler and kwok
	// with one fake node, so StatefulSets get Pods that become Running.
	Workloads bool
	// PodLogs (with Workloads) also has kwok serve the Pods' logs through
	// the API server's pods/log, attached to it as a kubelet is: kwok's
	// server listens on a port of its own, the fake node names it as its
	// kubelet's, and the API server reaches it by the node's InternalIP.
	// Every Pod logs DefaultLogLine, and CrashLogLine as its previous run;
	// ServePodLogs gives a Pod files of a test's own. Off, nothing of it
	// starts (kwok's server, the Logs CRD).
	PodLogs bool
}

// Cluster is a running control plane.
type Cluster struct {
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Kubeconfig is the path of the same admin credentials as a kubeconfig.
	Kubeconfig string
	// Dir holds certificates, data and one log per process.
	Dir string

	userToken string
	http      *http.Client // for readiness checks, admin credentials
	// apiserverArgs is how kube-apiserver was started, for RestartAPIServer.
	apiserverArgs []string
	// podLogs: kwok serves Pods' logs (Options.PodLogs).
	podLogs bool

	// mu guards procs and stopped: a restart may run beside Stop.
	mu        sync.Mutex
	procs     []*testproc.Process // in start order
	apiserver int                 // kube-apiserver's index in procs
	stopped   bool
}

// ErrStopped means the control plane has been stopped: nothing restarts.
var ErrStopped = errors.New("kubetest: control plane stopped")

// UserConfig is a client config for LimitedUser, for tests of what RBAC
// allows.
func (c *Cluster) UserConfig() *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = c.userToken
	return cfg
}

// StartForTest starts a control plane that stops when t ends. Without the
// binaries the test fails in CI and skips elsewhere.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("kubetest: needs a Kubernetes control plane; skipped in -short mode")
	}
	c, err := Start(context.Background(), opts)
	if errors.Is(err, ErrNoBinaries) {
		if ci.Running() {
			t.Fatal(err)
		}
		t.Skip(err.Error() + " (skipping outside CI)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// ErrNoBinaries means the control-plane binaries have not been built.
var ErrNoBinaries = errors.New("kubetest: Kubernetes binaries not built; run `go tool task kube:build` (or scripts/kube-binaries.sh) or set " + EnvBinDir)

// Start starts etcd and kube-apiserver (and the workload parts when asked)
// and waits until the apiserver is ready. Call Stop when done; use it from
// TestMain to share one control plane across a package.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	testproc.ReapStale()
	if opts.PodLogs && !opts.Workloads {
		return nil, errors.New("kubetest: Options.PodLogs needs Options.Workloads (kwok)")
	}
	ports := 3
	if opts.PodLogs {
		ports++ // kwok's server, the fake node's kubelet port
	}
	var c *Cluster
	err = testproc.WithFreePorts(ports, func(ports []int) (err error) {
		c, err = start(ctx, bin, opts, ports)
		return err
	})
	return c, err
}

func start(ctx context.Context, bin string, opts Options, ports []int) (c *Cluster, err error) {
	dir, err := testproc.NewDir("kube")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	pki, err := writePKI(dir)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)

	etcd, err := c.run(filepath.Join(bin, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, etcd, 30*time.Second, func(ctx context.Context) error { return httpOK(ctx, http.DefaultClient, etcdURL+"/health") }); err != nil {
		return nil, err
	}

	c.apiserver = len(c.procs)
	c.apiserverArgs = []string{filepath.Join(bin, "kube-apiserver"),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + pki.certFile,
		"--tls-private-key-file=" + pki.keyFile,
		"--client-ca-file=" + pki.caFile,
		"--token-auth-file=" + pki.tokenFile,
		"--authorization-mode=RBAC",
		"--etcd-servers=" + etcdURL,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPubFile,
		"--service-account-signing-key-file=" + pki.saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if opts.PodLogs {
		// The node's InternalIP (kwok's --node-ip), not its name, which
		// resolves nowhere; kwok's certificate is its own, unchecked as
		// the API server leaves a kubelet's without
		// --kubelet-certificate-authority.
		c.apiserverArgs = append(c.apiserverArgs, "--kubelet-preferred-address-types=InternalIP")
	}
	apiserver, err := c.run(c.apiserverArgs[0], c.apiserverArgs[1:]...)
	if err != nil {
		return nil, err
	}
	c.Config = &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		BearerToken:     pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: pki.caPEM},
		QPS:             -1, // tests drive the server hard; no client-side throttling
	}
	c.userToken = pki.userToken
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.Config); err != nil {
		return nil, err
	}
	if c.http, err = rest.HTTPClientFor(c.Config); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, apiserver); err != nil {
		return nil, err
	}
	if opts.Workloads {
		var kwokArgs []string
		if opts.PodLogs {
			c.podLogs = true
			if kwokArgs, err = c.podLogsArgs(ctx, ports[3]); err != nil {
				return nil, err
			}
		}
		if err := c.startWorkloads(ctx, bin, pki, kwokArgs...); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startWorkloads adds what turns a StatefulSet into Running Pods: the
// controllers that create and place them, and kwok playing the kubelet.
func (c *Cluster) startWorkloads(ctx context.Context, bin string, pki *pki, kwokArgs ...string) error {
	kubeconfigFlags := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
	}
	controllers := []string{
		"statefulset-controller", "replicaset-controller", "deployment-controller",
		"node-lifecycle-controller", "serviceaccount-controller", "serviceaccount-token-controller",
		"garbage-collector-controller", "namespace-controller", "endpointslice-controller",
		"pod-garbage-collector-controller",
	}
	if _, err := c.run(filepath.Join(bin, "kube-controller-manager"), append(kubeconfigFlags,
		"--secure-port=0",
		"--leader-elect=false",
		"--controllers="+strings.Join(controllers, ","),
		"--service-account-private-key-file="+pki.saKeyFile,
		"--root-ca-file="+pki.caFile,
		"--use-service-account-credentials=false",
		// The node lifecycle controller marks every Pod of a node whose
		// heartbeat (kwok's Lease renewals below) is older than this NotReady.
		// Shorter than the 50 s default so a test sees a missing heartbeat.
		"--node-monitor-grace-period="+NodeMonitorGrace.String(),
		"--node-monitor-period=2s",
	)...); err != nil {
		return err
	}
	if _, err := c.run(filepath.Join(bin, "kube-scheduler"), append(kubeconfigFlags,
		"--secure-port=0",
		"--leader-elect=false",
	)...); err != nil {
		return err
	}
	failing := filepath.Join(c.Dir, "kwok-failing-stages.yaml")
	if err := os.WriteFile(failing, failingStages, 0o644); err != nil {
		return err
	}
	if _, err := c.run(filepath.Join(bin, "kwok"), append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--config=" + filepath.Join(bin, "kwok-stages.yaml"),
		"--config=" + failing,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16",
		"--node-ip=127.0.0.1",
		// kwok renews the node's Lease every quarter of this, the kubelet's
		// heartbeat; without it the node goes Unknown after the grace period
		// and its Pods turn NotReady for good.
		"--node-lease-duration-seconds=10",
	}, kwokArgs...)...); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        FakeNodeName,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": FakeNodeName},
	}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create fake node: %w", err)
	}
	return nil
}

// waitReady waits until the API server answers /readyz.
func (c *Cluster) waitReady(ctx context.Context, apiserver *testproc.Process) error {
	return waitFor(ctx, apiserver, 60*time.Second, func(ctx context.Context) error { return httpOK(ctx, c.http, c.Config.Host+"/readyz") })
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash would) and
// starts it again on the same port, certificates and etcd, whose data
// stays: clients see their connections and watches break, then the same
// objects at the same address. The controller manager, scheduler and kwok
// keep running and reconnect by themselves. It returns once the new
// process is ready, or with ErrStopped once Stop has run (Stop may run
// during the restart: it kills the new process too).
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	p, err := c.relaunchAPIServer()
	if err != nil {
		return err
	}
	err = c.waitReady(ctx, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.stopped {
		return ErrStopped // what killed it
	}
	return err
}

func (c *Cluster) relaunchAPIServer() (*testproc.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, ErrStopped
	}
	c.procs[c.apiserver].Kill()
	p, err := testproc.Start(c.Dir, c.apiserverArgs[0], c.apiserverArgs[1:]...)
	if err != nil {
		return nil, err
	}
	c.procs[c.apiserver] = p // same place, so Stop still kills it before etcd
	return p, nil
}

// Stop kills every process, newest first, and removes the directory. Later
// calls do nothing.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Kill()
	}
	c.procs = nil
	if c.Dir != "" {
		os.RemoveAll(c.Dir)
	}
}

// Client is a typed admin clientset.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// Namespace creates a uniquely named namespace (with its default
// ServiceAccount, which nothing creates without the controller manager) and
// deletes it when t ends. Tests sharing a control plane isolate by it.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	return c.NamespaceLabeled(t, nil)
}

// NamespaceLabeled is Namespace with labels on the namespace (say, the
// label that hands a namespace to agentd).
func (c *Cluster) NamespaceLabeled(t testing.TB, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	client := c.Client(t)
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	_, err = client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create default service account: %v", err)
	}
	t.Cleanup(func() {
		client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func (c *Cluster) run(bin string, args ...string) (*testproc.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, ErrStopped
	}
	p, err := testproc.Start(c.Dir, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func waitFor(ctx context.Context, p *testproc.Process, limit time.Duration, ready func(context.Context) error) error {
	if err := testproc.WaitFor(ctx, p, limit, ready); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	kc.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*kc, path)
}

// binDir finds the built binaries: DEPLOYSYNC_KUBE_BIN, or the cache entry
// scripts/kube-binaries.sh would use (asked with --cached-only, so a test
// never starts the long build itself).
func binDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
			return "", fmt.Errorf("%w (%s=%s: %v)", ErrNoBinaries, EnvBinDir, dir, err)
		}
		return dir, nil
	}
	script, err := findScript()
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoBinaries, err)
	}
	out, err := exec.Command("bash", script, "--cached-only").Output()
	if err != nil {
		return "", ErrNoBinaries
	}
	return strings.TrimSpace(string(out)), nil
}

// findScript walks up from the working directory (a package directory
// under go test) to the repository's scripts/kube-binaries.sh.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		script := filepath.Join(dir, "scripts", "kube-binaries.sh")
		if _, err := os.Stat(script); err == nil {
			return script, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/kube-binaries.sh not found above the working directory")
		}
		dir = parent
	}
}
