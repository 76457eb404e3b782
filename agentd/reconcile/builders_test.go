package reconcile

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A sentinel is a Deployment behind a ClusterIP Service, named apart from
// deployments' objects.
func TestSentinelObjects(t *testing.T) {
	s := &ctrlv1.SentinelState{SentinelId: "s1", Namespace: "ns1", Image: "sentinel:1", Replicas: 2, CpuMillicores: 100, MemoryMib: 64}
	svc, dep := desiredSentinel(s)
	name := sentinelAt(s).name
	wantLabels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.SentinelLabel: "s1"}
	if *svc.Name != name || *dep.Name != name || name == "s1" || *svc.Namespace != "ns1" || *dep.Namespace != "ns1" {
		t.Errorf("sentinel objects named %s / %s in %s, want %s (not the bare ID)", *svc.Name, *dep.Name, *svc.Namespace, name)
	}
	if *svc.Spec.Type != corev1.ServiceTypeClusterIP || *svc.Spec.Ports[0].Port != SentinelPort || !maps.Equal(svc.Labels, wantLabels) {
		t.Errorf("sentinel service %+v", svc.Spec)
	}
	if *dep.Spec.Replicas != 2 || !maps.Equal(dep.Spec.Template.Labels, wantLabels) || *dep.Spec.Template.Spec.Containers[0].Image != "sentinel:1" {
		t.Errorf("sentinel deployment %+v", dep.Spec)
	}
}

// A policy object carries its spec as given and the labels that tie it to
// its policy and, when it has one, its deployment.
func TestPolicyObject(t *testing.T) {
	spec, err := structpb.NewStruct(map[string]any{"endpointSelector": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"", "api"} {
		p := &ctrlv1.CiliumNetworkPolicyState{PolicyId: "p1", Name: "allow-web", Namespace: "ns1", DeploymentId: owner, Spec: spec}
		obj := desiredPolicy(p)
		if obj.GetKind() != "CiliumNetworkPolicy" || obj.GetAPIVersion() != "cilium.io/v2" || obj.GetName() != "allow-web" || obj.GetNamespace() != "ns1" {
			t.Errorf("owner %q: object %s %s %s/%s", owner, obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName())
		}
		labels := obj.GetLabels()
		if labels[kube.ManagedByLabel] != kube.ManagedByValue || labels[kube.PolicyLabel] != "p1" || labels[kube.DeploymentLabel] != owner {
			t.Errorf("owner %q: labels %v", owner, labels)
		}
		if _, ok := obj.Object["spec"].(map[string]any)["endpointSelector"]; !ok {
			t.Errorf("owner %q: spec %v", owner, obj.Object["spec"])
		}
	}
}
