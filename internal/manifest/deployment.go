package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/yaml"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// DefaultPort is a deployment's port when its state gives none.
const DefaultPort = 8080

// Deployment is what the agent applies for a deployment in a region, in
// the order it applies them: the Service, then the StatefulSet, each
// stamped with the hash of its content (HashAnnotation).
type Deployment struct {
	Service     *corev1ac.ServiceApplyConfiguration
	StatefulSet *appsv1ac.StatefulSetApplyConfiguration
	// ServiceHash and StatefulSetHash are the hashes stamped on them.
	ServiceHash, StatefulSetHash string
}

// NewDeployment builds a deployment's objects from its state: a headless
// Service and a StatefulSet, both named by the deployment's ID in its
// namespace. It checks nothing: the agent refuses a state it cannot apply
// before it builds (a missing ID, a spec hash that is no label value).
func NewDeployment(s *ctrlv1.DeploymentState) (Deployment, error) {
	svc, sts := deploymentObjects(s)
	svcHash, err := Stamp(svc, svc.WithAnnotations)
	if err != nil {
		return Deployment{}, fmt.Errorf("deployment %s: hash its Service: %w", s.GetDeploymentId(), err)
	}
	stsHash, err := Stamp(sts, sts.WithAnnotations)
	if err != nil {
		return Deployment{}, fmt.Errorf("deployment %s: hash its StatefulSet: %w", s.GetDeploymentId(), err)
	}
	return Deployment{Service: svc, StatefulSet: sts, ServiceHash: svcHash, StatefulSetHash: stsHash}, nil
}

// deploymentObjects builds the Service and StatefulSet for a deployment,
// without the hash annotation.
func deploymentObjects(s *ctrlv1.DeploymentState) (*corev1ac.ServiceApplyConfiguration, *appsv1ac.StatefulSetApplyConfiguration) {
	id, ns := s.GetDeploymentId(), s.GetNamespace()
	name := id
	objLabels := map[string]string{ManagedByLabel: ManagedByValue, DeploymentLabel: id}
	selector := map[string]string{DeploymentLabel: id}
	port := s.GetPort()
	if port == 0 {
		port = DefaultPort
	}

	svc := corev1ac.Service(name, ns).WithLabels(objLabels).WithSpec(corev1ac.ServiceSpec().
		WithClusterIP(corev1.ClusterIPNone).
		WithPublishNotReadyAddresses(true).
		WithSelector(selector).
		WithPorts(corev1ac.ServicePort().WithName("http").WithPort(port).WithTargetPort(intstr.FromInt32(port))))

	resources := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(s.GetCpuMillicores()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(s.GetMemoryMib())*1024*1024, resource.BinarySI),
	}
	container := corev1ac.Container().
		WithName("app").
		WithImage(s.GetImage()).
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(port)).
		WithResources(corev1ac.ResourceRequirements().WithRequests(resources).WithLimits(resources))
	if len(s.GetCommand()) > 0 {
		container.WithCommand(s.GetCommand()...)
	}
	for _, name := range slices.Sorted(maps.Keys(s.GetEnv())) {
		container.WithEnv(corev1ac.EnvVar().WithName(name).WithValue(s.GetEnv()[name]))
	}
	// The spec hash goes on the pod template only (SpecHashLabel): on the
	// Pods it says which spec each runs; not in the selector, which is
	// immutable and must keep selecting the Pods of every revision.
	podLabels := maps.Clone(objLabels)
	if hash := s.GetSpecHash(); hash != "" {
		podLabels[SpecHashLabel] = hash
	}
	sts := appsv1ac.StatefulSet(name, ns).WithLabels(objLabels).WithSpec(appsv1ac.StatefulSetSpec().
		WithReplicas(s.GetReplicas()).
		WithServiceName(name).
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(podLabels).
			WithSpec(corev1ac.PodSpec().
				WithRestartPolicy(corev1.RestartPolicyAlways).
				WithContainers(container))))
	return svc, sts
}

// YAML is the objects as the agent applies them, one YAML document each in
// the order it applies them, separated by "---". With redact set, each env
// value and command argument is shown as redact makes it (the audit log's
// "<redacted, N bytes>"): they may be credentials. The hash annotations
// stay the ones of the objects applied, computed before redaction.
func (d Deployment) YAML(redact func(string) string) ([]byte, error) {
	sts := d.StatefulSet
	if redact != nil {
		// On a copy: d's objects are the ones the agent applies.
		var err error
		if sts, err = clone(sts); err != nil {
			return nil, err
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			for i, arg := range c.Command {
				c.Command[i] = redact(arg)
			}
			for i, e := range c.Env {
				if e.Value != nil {
					c.Env[i].Value = ptr(redact(*e.Value))
				}
			}
		}
	}
	var out []byte
	for i, o := range []any{d.Service, sts} {
		doc, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("deployment objects as YAML: %w", err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, doc...)
	}
	return out, nil
}

// clone is a deep copy of an apply configuration, by its JSON, which holds
// all of it.
func clone[T any](o *T) (*T, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var c T
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func ptr[T any](v T) *T { return &v }
