package kubetest

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// InstallCiliumCRD installs a minimal cilium.io/v2 CiliumNetworkPolicy CRD
// (any spec accepted) and waits until the API server serves it.
func (c *Cluster) InstallCiliumCRD(t testing.TB) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "ciliumnetworkpolicies.cilium.io"},
		"spec": map[string]any{
			"group": "cilium.io",
			"scope": "Namespaced",
			"names": map[string]any{"kind": "CiliumNetworkPolicy", "plural": "ciliumnetworkpolicies", "singular": "ciliumnetworkpolicy", "listKind": "CiliumNetworkPolicyList"},
			"versions": []any{map[string]any{
				"name": "v2", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	ctx := context.Background()
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	policies := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := dyn.Resource(policies).List(ctx, metav1.ListOptions{}); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the CiliumNetworkPolicy CRD is not served after 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
