package reconcile

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/deploysync/deploysync/agentd/kube"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The objects built for a deployment are what the design asks of them,
// whatever the state holds; no API server needed (task test:short runs
// these). What only the API server decides (SSA ownership, conflicts,
// moves) is proved against one in the other tests.
func TestDeploymentObjects(t *testing.T) {
	cases := []struct {
		name    string
		state   *ctrlv1.DeploymentState
		port    int32
		command []string
		env     []string // names, in order
	}{
		{"defaults", &ctrlv1.DeploymentState{DeploymentId: "api", Namespace: "ns1", Image: "app:1", Replicas: 3, CpuMillicores: 250, MemoryMib: 128}, 8080, nil, nil},
		{"port, command and env", &ctrlv1.DeploymentState{DeploymentId: "web", Namespace: "ns2", Image: "web:2", Replicas: 0, CpuMillicores: 1, MemoryMib: 1,
			Port: 9000, Command: []string{"/bin/web", "--flag"}, Env: map[string]string{"Z": "1", "A": "2", "M": "3"}}, 9000, []string{"/bin/web", "--flag"}, []string{"A", "M", "Z"}},
	}
	for _, c := range cases {
		svc, sts := desiredDeployment(c.state)
		id, ns := c.state.GetDeploymentId(), c.state.GetNamespace()
		wantLabels := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id}
		if *svc.Name != id || *svc.Namespace != ns || !maps.Equal(svc.Labels, wantLabels) {
			t.Errorf("%s: service %s/%s labels %v", c.name, *svc.Namespace, *svc.Name, svc.Labels)
		}
		if *svc.Spec.ClusterIP != corev1.ClusterIPNone || !*svc.Spec.PublishNotReadyAddresses ||
			!maps.Equal(svc.Spec.Selector, map[string]string{kube.DeploymentLabel: id}) || *svc.Spec.Ports[0].Port != c.port {
			t.Errorf("%s: service is not headless on the deployment's port %d: %+v", c.name, c.port, svc.Spec)
		}
		if *sts.Name != id || *sts.Namespace != ns || !maps.Equal(sts.Labels, wantLabels) || *sts.Spec.ServiceName != id ||
			*sts.Spec.Replicas != c.state.GetReplicas() || !maps.Equal(sts.Spec.Template.Labels, wantLabels) ||
			!maps.Equal(sts.Spec.Selector.MatchLabels, map[string]string{kube.DeploymentLabel: id}) {
			t.Errorf("%s: statefulset %+v", c.name, sts)
		}
		pod := sts.Spec.Template.Spec
		if *pod.RestartPolicy != corev1.RestartPolicyAlways || len(pod.Containers) != 1 {
			t.Fatalf("%s: pod spec %+v", c.name, pod)
		}
		ctr := pod.Containers[0]
		if *ctr.Image != c.state.GetImage() || *ctr.Ports[0].ContainerPort != c.port || len(ctr.Command) != len(c.command) {
			t.Errorf("%s: container image %s port %d command %v", c.name, *ctr.Image, *ctr.Ports[0].ContainerPort, ctr.Command)
		}
		wantCPU := resource.NewMilliQuantity(int64(c.state.GetCpuMillicores()), resource.DecimalSI)
		wantMem := resource.NewQuantity(int64(c.state.GetMemoryMib())*1024*1024, resource.BinarySI)
		for what, list := range map[string]*corev1.ResourceList{"requests": ctr.Resources.Requests, "limits": ctr.Resources.Limits} {
			if cpu, mem := (*list)[corev1.ResourceCPU], (*list)[corev1.ResourceMemory]; cpu.Cmp(*wantCPU) != 0 || mem.Cmp(*wantMem) != 0 {
				t.Errorf("%s: %s cpu %s memory %s, want %s and %s (requests = limits)", c.name, what, cpu.String(), mem.String(), wantCPU, wantMem)
			}
		}
		var env []string
		for _, e := range ctr.Env {
			env = append(env, *e.Name)
			if *e.Value != c.state.GetEnv()[*e.Name] {
				t.Errorf("%s: env %s = %q", c.name, *e.Name, *e.Value)
			}
		}
		if len(env) != len(c.env) {
			t.Fatalf("%s: env %v, want %v", c.name, env, c.env)
		}
		for i := range env {
			if env[i] != c.env[i] {
				t.Errorf("%s: env order %v, want %v (sorted, so the spec hash is stable)", c.name, env, c.env)
			}
		}
	}
}

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
