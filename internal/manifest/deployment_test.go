package manifest

import (
	"bytes"
	"fmt"
	"maps"
	"testing"

	"github.com/charmbracelet/x/exp/golden"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The objects built for a deployment are what the design asks of them,
// whatever the state holds; no API server needed. What the API server
// makes of them is proved in agentd/reconcile, against one.
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
		d, err := NewDeployment(c.state)
		if err != nil {
			t.Fatal(err)
		}
		svc, sts := d.Service, d.StatefulSet
		id, ns := c.state.GetDeploymentId(), c.state.GetNamespace()
		wantLabels := map[string]string{ManagedByLabel: ManagedByValue, DeploymentLabel: id}
		if *svc.Name != id || *svc.Namespace != ns || !maps.Equal(svc.Labels, wantLabels) {
			t.Errorf("%s: service %s/%s labels %v", c.name, *svc.Namespace, *svc.Name, svc.Labels)
		}
		if *svc.Spec.ClusterIP != corev1.ClusterIPNone || !*svc.Spec.PublishNotReadyAddresses ||
			!maps.Equal(svc.Spec.Selector, map[string]string{DeploymentLabel: id}) || *svc.Spec.Ports[0].Port != c.port {
			t.Errorf("%s: service is not headless on the deployment's port %d: %+v", c.name, c.port, svc.Spec)
		}
		if *sts.Name != id || *sts.Namespace != ns || !maps.Equal(sts.Labels, wantLabels) || *sts.Spec.ServiceName != id ||
			*sts.Spec.Replicas != c.state.GetReplicas() || !maps.Equal(sts.Spec.Template.Labels, wantLabels) ||
			!maps.Equal(sts.Spec.Selector.MatchLabels, map[string]string{DeploymentLabel: id}) {
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

// webState is a deployment with every field set.
func webState() *ctrlv1.DeploymentState {
	return &ctrlv1.DeploymentState{DeploymentId: "web", Namespace: "ns2", Image: "web:2", Replicas: 3, CpuMillicores: 250, MemoryMib: 128,
		Port: 9000, Command: []string{"/bin/web", "--flag"}, Env: map[string]string{"Z": "1", "A": "2", "M": "3"}, SpecHash: "abc"}
}

// The YAML of a deployment's objects, as applied: the golden holds what
// the agent applied before its builder moved here (hash annotations
// included), so any change to what every agent applies shows here first.
// Run with -update to accept a change on purpose.
func TestDeploymentYAML(t *testing.T) {
	d, err := NewDeployment(webState())
	if err != nil {
		t.Fatal(err)
	}
	y, err := d.YAML(nil)
	if err != nil {
		t.Fatal(err)
	}
	golden.RequireEqual(t, y)
}

// Redacted, env values and command arguments are replaced, on a copy: the
// hash annotations stay those of the objects applied, and the objects
// themselves keep their values.
func TestDeploymentYAMLRedacted(t *testing.T) {
	d, err := NewDeployment(webState())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := d.YAML(nil)
	if err != nil {
		t.Fatal(err)
	}
	redacted, err := d.YAML(func(v string) string { return fmt.Sprintf("<redacted, %d bytes>", len(v)) })
	if err != nil {
		t.Fatal(err)
	}
	golden.RequireEqual(t, redacted)
	for _, secret := range []string{`value: "2"`, "/bin/web", "--flag"} {
		if bytes.Contains(redacted, []byte(secret)) {
			t.Errorf("redacted YAML shows %q:\n%s", secret, redacted)
		}
	}
	if again, _ := d.YAML(nil); !bytes.Equal(again, plain) {
		t.Errorf("redacting changed the objects the agent applies:\n%s\nwant\n%s", again, plain)
	}
}
