package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/kubetest"
)

// shared is one API server for the package's tests.
var shared kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.RunShared(m, &shared)) }

func TestManifestsApplyStrictly(t *testing.T) {
	c := shared.Get(t)
	for _, file := range []string{"ctrld.yaml", "agentd.yaml"} {
		applyManifest(t, c, file)
	}
}

// applyManifest server-side applies every object of file with strict field
// validation, failing t for each the API server refuses.
func applyManifest(t *testing.T, c *kubetest.Cluster, file string) {
	t.Helper()
	ctx := context.Background()
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	client, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	objects := decode(t, file)
	if len(objects) == 0 {
		t.Fatalf("%s holds no objects", file)
	}
	for _, obj := range objects {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", file, gvk.Kind, obj.GetName(), err)
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		var r dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			r = client.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := r.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager: "manifest-test", FieldValidation: "Strict",
		}); err != nil {
			t.Errorf("%s: apply %s %s: %v", file, gvk.Kind, obj.GetName(), err)
		}
	}
}

func decode(t *testing.T, file string) []*unstructured.Unstructured {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// The manifests send no token in the clear: agentd reaches ctrld across
// the network, so both sides talk TLS. (Plaintext would need the explicit
// overrides ctrld and agentd demand off loopback, see internal/dial.)
func TestManifestsNeverSendTokensInTheClear(t *testing.T) {
	ctrld := containerEnv(t, "ctrld.yaml", "ctrld")
	if ctrld["CTRLD_TLS_CERT"] == "" || ctrld["CTRLD_TLS_KEY"] == "" || ctrld["CTRLD_INSECURE_LISTEN"] != "" {
		t.Errorf("ctrld.yaml: ctrld does not serve TLS only: %v", ctrld)
	}
	agentd := containerEnv(t, "agentd.yaml", "agentd")
	if agentd["AGENTD_INSECURE"] != "" || agentd["AGENTD_INSECURE_NON_LOOPBACK"] != "" || dial.Loopback(agentd["AGENTD_CTRLD_ADDRESS"]) {
		t.Errorf("agentd.yaml: agentd does not talk TLS to ctrld's network address: %v", agentd)
	}
}

// Each binary's GOMEMLIMIT is below its container's memory limit, with room
// for what is not heap: the runtime then collects harder as the heap grows
// instead of the container being killed for it.
func TestGoMemoryLimitsStayBelowTheContainers(t *testing.T) {
	for file, container := range map[string]string{"ctrld.yaml": "ctrld", "agentd.yaml": "agentd"} {
		soft, err := resource.ParseQuantity(strings.Replace(containerEnv(t, file, container)["GOMEMLIMIT"], "iB", "i", 1))
		if err != nil {
			t.Errorf("%s: GOMEMLIMIT: %v", file, err)
			continue
		}
		limit := memoryLimit(t, file, container)
		if ratio := float64(soft.Value()) / float64(limit.Value()); ratio < 0.8 || ratio > 0.95 {
			t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s, want 80-95%%", file, soft.String(), 100*ratio, limit.String())
		}
	}
}

// memoryLimit is the named container's memory limit in file.
func memoryLimit(t *testing.T, file, container string) resource.Quantity {
	t.Helper()
	for _, c := range containers(t, file) {
		if c["name"] == container {
			v, _, _ := unstructured.NestedString(c, "resources", "limits", "memory")
			q, err := resource.ParseQuantity(v)
			if err != nil {
				t.Fatalf("%s: %s's memory limit %q: %v", file, container, v, err)
			}
			return q
		}
	}
	t.Fatalf("%s: no Deployment with a container %s", file, container)
	return resource.Quantity{}
}

// containers are the containers of the Deployment in file.
func containers(t *testing.T, file string) []map[string]any {
	t.Helper()
	for _, obj := range decode(t, file) {
		if obj.GetKind() != "Deployment" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		var out []map[string]any
		for _, c := range list {
			out = append(out, c.(map[string]any))
		}
		return out
	}
	t.Fatalf("%s: no Deployment", file)
	return nil
}

// containerEnv is the literal environment of the named container of the
// Deployment in file.
func containerEnv(t *testing.T, file, container string) map[string]string {
	t.Helper()
	for _, c := range containers(t, file) {
		if c["name"] != container {
			continue
		}
		env := map[string]string{}
		for _, e := range c["env"].([]any) {
			e := e.(map[string]any)
			if v, ok := e["value"].(string); ok {
				env[e["name"].(string)] = v
			}
		}
		return env
	}
	t.Fatalf("%s: no Deployment with a container %s", file, container)
	return nil
}

// ctrld.yaml serves the console over SSH with a host key from a Secret:
// the path ctrld is given lies in a mounted Secret volume that the
// container's user can read and nobody else (the kubelet makes its files
// root's, group fsGroup, and adds group read), the port ctrld listens on
// is the container's port "ssh", and a Service of its own reaches it
// keeping the clients' addresses (the per-address limits and the audit
// need them).
func TestCtrldServesSSHWithAHostKeyFromASecret(t *testing.T) {
	const file = "ctrld.yaml"
	env := containerEnv(t, file, "ctrld")
	key := env["CTRLD_SSH_HOST_KEY"]
	if env["CTRLD_SSH_LISTEN"] != ":2222" || key == "" || env["CTRLD_SSH_GENERATE_HOST_KEY"] != "" {
		t.Fatalf("%s: want CTRLD_SSH_LISTEN=:2222 and CTRLD_SSH_HOST_KEY, and no generated key: %v", file, env)
	}
	pod := podSpec(t, file)
	var ctr map[string]any
	for _, c := range containers(t, file) {
		if c["name"] == "ctrld" {
			ctr = c
		}
	}
	ports, _, _ := unstructured.NestedSlice(ctr, "ports")
	if !slices.ContainsFunc(ports, func(p any) bool {
		port := p.(map[string]any)
		return port["name"] == "ssh" && number(port["containerPort"]) == 2222
	}) {
		t.Errorf("%s: no container port ssh 2222: %v", file, ports)
	}

	mounts, _, _ := unstructured.NestedSlice(ctr, "volumeMounts")
	var volume string
	for _, m := range mounts {
		m := m.(map[string]any)
		if dir := m["mountPath"].(string); path.Dir(key) == path.Clean(dir) {
			volume = m["name"].(string)
		}
	}
	if volume == "" {
		t.Fatalf("%s: the host key %s is in no mounted volume: %v", file, key, mounts)
	}
	volumes, _, _ := unstructured.NestedSlice(pod, "volumes")
	var secret map[string]any
	for _, v := range volumes {
		if v := v.(map[string]any); v["name"] == volume {
			secret, _ = v["secret"].(map[string]any)
		}
	}
	if secret == nil || secret["secretName"] != "ctrld-ssh-host-key" {
		t.Fatalf("%s: the host key's volume %s is not the Secret ctrld-ssh-host-key: %v", file, volume, secret)
	}
	if mode := number(secret["defaultMode"]); mode == 0 || mode&0o077 != 0 {
		t.Errorf("%s: the host key's mode %o: want owner-only (0400): the kubelet adds group read for fsGroup", file, mode)
	}
	user, _, _ := unstructured.NestedFieldNoCopy(pod, "securityContext", "runAsUser")
	if fsGroup, _, _ := unstructured.NestedFieldNoCopy(pod, "securityContext", "fsGroup"); number(user) != 0 && fsGroup == nil {
		t.Errorf("%s: ctrld runs as user %d without an fsGroup: the Secret's root-owned 0400 file is unreadable to it", file, number(user))
	}

	var svc *unstructured.Unstructured
	for _, obj := range decode(t, file) {
		if obj.GetKind() == "Service" && obj.GetName() == "ctrld-ssh" {
			svc = obj
		}
	}
	if svc == nil {
		t.Fatalf("%s: no Service ctrld-ssh", file)
	}
	policy, _, _ := unstructured.NestedString(svc.Object, "spec", "externalTrafficPolicy")
	svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if policy != "Local" || len(svcPorts) != 1 || svcPorts[0].(map[string]any)["targetPort"] != "ssh" {
		t.Errorf("%s: Service ctrld-ssh: want externalTrafficPolicy Local (clients' own addresses) and one port to ssh, got %s %v", file, policy, svcPorts)
	}
}

// Every CTRLD_* variable and flag ctrld.yaml gives ctrld is one `ctrld
// serve` reads: a misspelt one would be ignored silently, e.g. leaving the
// SSH console off.
func TestCtrldSettingsAreOnesCtrldReads(t *testing.T) {
	help := ctrldServeHelp(t)
	for _, c := range containers(t, "ctrld.yaml") {
		if c["name"] != "ctrld" {
			continue
		}
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if len(args) == 0 || args[0] != "serve" {
			t.Fatalf("ctrld.yaml: ctrld's args %v do not start with serve", args)
		}
		for _, a := range args[1:] {
			if flag, _, _ := strings.Cut(a, "="); strings.HasPrefix(flag, "-") && !strings.Contains(help, " -"+strings.TrimLeft(flag, "-")+" ") && !strings.Contains(help, " --"+strings.TrimLeft(flag, "-")+" ") {
				t.Errorf("ctrld.yaml passes %s, which ctrld serve does not take", flag)
			}
		}
		for _, e := range c["env"].([]any) {
			name := e.(map[string]any)["name"].(string)
			if strings.HasPrefix(name, "CTRLD_") && !strings.Contains(help, "$"+name+"]") && !strings.Contains(help, "$"+name+",") {
				t.Errorf("ctrld.yaml sets %s, which ctrld serve does not read", name)
			}
		}
	}
}

// ctrldServeHelp is `ctrld serve --help`, of ctrld built as its Dockerfile
// builds it (scripts/static-build.sh, whose packages `go tool task test`
// has in the build cache already).
func ctrldServeHelp(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	cmd := exec.Command("bash", "scripts/static-build.sh", bin)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "ctrld"), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("ctrld serve --help: %v\n%s", err, out)
	}
	return string(out)
}

// podSpec is the pod template's spec of the Deployment in file.
func podSpec(t *testing.T, file string) map[string]any {
	t.Helper()
	for _, obj := range decode(t, file) {
		if obj.GetKind() == "Deployment" {
			spec, _, _ := unstructured.NestedMap(obj.Object, "spec", "template", "spec")
			return spec
		}
	}
	t.Fatalf("%s: no Deployment", file)
	return nil
}

// number is a number decoded from YAML (by way of JSON: a float64).
func number(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}
