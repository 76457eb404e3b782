package reconcile_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/manifest"
)

// The YAML ctrld shows operators for a deployment in a region
// (internal/manifest, from the state the stream sends) is what the agent
// applied: the API server's record of what the agent's field manager
// applied to each object (its managed fields, extracted) reads, as YAML,
// exactly as the YAML built from the same state, secrets and all, and the
// same again with both redacted; after a change too.
func TestShownYAMLIsWhatTheAgentApplied(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.state("api", 2)
	s.Port, s.SpecHash = 9000, "rev-1"
	s.Env["TOKEN"] = "hunter2"
	s.Command = append(s.Command, "--password=swordfish")
	redact := func(v string) string { return fmt.Sprintf("<redacted, %d bytes>", len(v)) }
	for _, replicas := range []int32{2, 3} {
		s.Replicas = replicas
		if err := e.deps.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
		svc, err := e.admin.CoreV1().Services(e.ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var applied manifest.Deployment
		if applied.Service, err = corev1ac.ExtractService(svc, kube.FieldManager); err != nil {
			t.Fatal(err)
		}
		if applied.StatefulSet, err = appsv1ac.ExtractStatefulSet(sts, kube.FieldManager); err != nil {
			t.Fatal(err)
		}
		shown, err := manifest.NewDeployment(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []func(string) string{nil, redact} {
			want, err := applied.YAML(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := shown.YAML(r)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("replicas %d, redacted %v: shown\n%s\nbut the agent applied\n%s", replicas, r != nil, got, want)
			}
		}
	}
}
