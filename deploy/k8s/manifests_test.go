// Package k8s holds the Kubernetes manifests for ctrld and agentd. This test
// applies them to a real API server with strict field validation, so a
// misspelt field or an invalid value fails here instead of at
// `kubectl apply`. (That the agent's RBAC is sufficient is proven in
// agentd/agent's TestShippedRoleIsSufficient.)
package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
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
