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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/deploysync/deploysync/internal/kubetest"
)

func TestManifestsApplyStrictly(t *testing.T) {
	c := kubetest.StartForTest(t, kubetest.Options{})
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

	for _, file := range []string{"ctrld.yaml", "agentd.yaml"} {
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
