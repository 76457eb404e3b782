package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
)

// TestSpecHashLabelsThePodTemplate: the spec hash ctrld sends goes on the
// pod template (so on every Pod made from it), not on the selector, which
// must keep selecting the Pods of every revision; a new hash replaces it,
// none removes it (an older ctrld), and a hash that is no label value is
// refused as a bad event before anything is written.
func TestSpecHashLabelsThePodTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	templateLabel := func() (string, bool) {
		t.Helper()
		sts, err := e.admin.AppsV1().StatefulSets(e.ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, in := sts.Spec.Selector.MatchLabels[kube.SpecHashLabel]; in || len(sts.Spec.Selector.MatchLabels) != 1 {
			t.Errorf("selector %v: want the deployment's ID only", sts.Spec.Selector.MatchLabels)
		}
		if _, on := sts.Labels[kube.SpecHashLabel]; on {
			t.Errorf("the StatefulSet itself carries %s: %v", kube.SpecHashLabel, sts.Labels)
		}
		h, ok := sts.Spec.Template.Labels[kube.SpecHashLabel]
		return h, ok
	}
	s := e.state("api", 1)
	for _, hash := range []string{"0123456789abcdef", "rev-2.b_c"} {
		s.SpecHash = hash
		if err := e.deps.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, _ := templateLabel(); got != hash {
			t.Errorf("pod template's %s = %q, want %q", kube.SpecHashLabel, got, hash)
		}
	}
	s.SpecHash = ""
	if err := e.deps.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, ok := templateLabel(); ok {
		t.Errorf("no hash sent, yet the pod template carries %s=%q", kube.SpecHashLabel, got)
	}

	before := e.counter.Writes()
	for _, bad := range []string{"not a label", strings.Repeat("a", 64), "-a", "a/b"} {
		s.SpecHash = bad
		err := e.deps.Apply(ctx, s)
		if !errors.Is(err, kube.ErrBadEvent) || !strings.Contains(err.Error(), "spec_hash") {
			t.Errorf("hash %q: Apply = %v; want kube.ErrBadEvent naming spec_hash", bad, err)
		}
	}
	if n := e.counter.Writes() - before; n != 0 {
		t.Errorf("refused applies made %d writes", n)
	}
}
