package naming

import (
	"strings"
	"testing"
)

func TestReserved(t *testing.T) {
	r := MustReserved(" platform", "", "internal-tools ", "platform")
	for ns, want := range map[string]bool{
		"kube-system": true, "kube-public": true, "kube-node-lease": true, "kube-x-y": true,
		"default": true, "deploysync": true, "cert-manager": true, "platform": true,
		"istio-system": true, "gatekeeper-system": true, "flux-system": true, "a-b-system": true,
		"argocd": true, "ingress-nginx": true, "kyverno": true,
		"acme-prod": false, "kube": false, "kubex-prod": false, "defaults": false, "deploysync-prod": false,
		"system": false, "system-prod": false, "acme-systems": false, "acme-systemd": false, "cert-managers": false, "monitoring": false,
	} {
		if why, got := r.Why(ns); got != want || got == (why == "") {
			t.Errorf("Why(%q) = %q, %v; want reserved %v", ns, why, got, want)
		}
	}
	if got := r.Names(); strings.Join(got, ",") != "internal-tools,platform" {
		t.Errorf("Names() = %v, want the extra names sorted and without duplicates", got)
	}
	var zero Reserved
	if _, ok := zero.Why("kube-system"); !ok {
		t.Error("the zero Reserved must still hold kube-*")
	}
	if _, ok := zero.Why("deploysync"); !ok {
		t.Error("the zero Reserved must hold the agent's namespace of the shipped manifests")
	}
	for _, ns := range []string{"istio-system", "cert-manager", "argocd"} {
		if _, ok := zero.Why(ns); !ok {
			t.Errorf("the zero Reserved must hold the add-ons' %s", ns)
		}
	}
	if _, ok := zero.Why("internal-tools"); ok {
		t.Error("the zero Reserved holds only kube-*, *-system, default, deploysync and the add-ons' namespaces")
	}
	for _, bad := range []string{"Kube", "a_b", "-x", strings.Repeat("a", 64)} {
		if _, err := NewReserved(bad); err == nil {
			t.Errorf("NewReserved(%q) accepted a name that is no namespace name", bad)
		}
	}
}

// Pairs that make a kube-*, *-system or add-on namespace are reserved; no pair makes a name
// without a hyphen, such as "default" or "deploysync", so those are
// reserved for a namespace a pair can never have anyway (defence in depth,
// and the agent's rule, which sees namespaces, not pairs).
func TestReservedPairs(t *testing.T) {
	var r Reserved
	for _, p := range [][2]string{{"kube", "system"}, {"kube", "public"}, {"kube-node", "lease"}, {"kube", strings.Repeat("x", 60)},
		{"cert", "manager"}, {"ingress", "nginx"}, {"istio", "system"}, {"flux", "system"}, {"gatekeeper", "system"}, {"external", "dns"},
		// Add-ons whose namespaces do not end in -system: a tenant could
		// claim one before the add-on arrives.
		{"istio", "ingress"}, {"knative", "serving"}, {"tekton", "pipelines"}, {"argo", "rollouts"}, {"rook", "ceph"}} {
		if _, ok := r.Why(Namespace(p[0], p[1])); !ok {
			t.Errorf("pair %v makes %q, which must be reserved", p, Namespace(p[0], p[1]))
		}
	}
	if ns := Namespace(strings.Repeat("a", 48), strings.Repeat("b", 48)); !strings.Contains(ns, "-") {
		t.Errorf("a shortened namespace %q has no hyphen", ns)
	}
}
