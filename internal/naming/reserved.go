package naming

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deploysync/deploysync/internal/validate"
)

// AgentNamespace is the namespace deploy/k8s/agentd.yaml runs agentd in.
// It is always reserved; an agent run in another namespace reserves that
// one too (agentd's --namespace), and ctrld learns of it from
// --reserved-namespaces.
const AgentNamespace = "deploysync"

// kubePrefix starts the namespaces Kubernetes keeps for itself
// (kube-system, kube-public, kube-node-lease) and the ones its add-ons
// conventionally take.
const kubePrefix = "kube-"

// systemSuffix ends the namespaces cluster add-ons conventionally take
// (istio-system, gatekeeper-system, flux-system, calico-system,
// cattle-system, crossplane-system, ...): every "*-system" is reserved.
const systemSuffix = "-system"

// AddOnNamespaces are the namespaces common cluster add-ons install into
// by default that neither "kube-*" nor "*-system" covers. The list is
// short on purpose: names that are clearly an add-on's, not words a
// tenant might use ("monitoring" is not here). An operator reserves more
// with --reserved-namespaces (ctrld and agentd).
var AddOnNamespaces = []string{
	"argo-rollouts", "argocd", "calico-apiserver", "cert-manager", "external-dns", "external-secrets", "ingress-nginx",
	"istio-ingress", "karpenter", "keda", "knative-serving", "kyverno", "linkerd", "rook-ceph", "tekton-pipelines",
	"tigera-operator", "velero",
}

// Reserved is the tenant boundary's rule: the namespaces no workspace's
// environment may have, which ctrld refuses to assign and agentd refuses
// to write into. It always holds every "kube-*" and every "*-system"
// namespace, "default", AgentNamespace and AddOnNamespaces; its other names are exact ones (an agent's own
// namespace, and what an operator lists with --reserved-namespaces). The
// zero Reserved holds the ones always reserved.
//
// No pair makes "default" or AgentNamespace: Namespace always joins two
// IDs with a hyphen. They are reserved all the same, for the agent, which
// sees namespaces rather than pairs, and so that the rule reads as what it
// protects.
//
// It lives here, beside Namespace, so that both binaries import the one
// rule without agentd linking anything of ctrld's.
type Reserved struct {
	names []string // sorted, without duplicates
}

// NewReserved is the rule with names reserved besides those always
// reserved.
// Each name must be a namespace name (a DNS label); empty entries and
// surrounding spaces are ignored, so a comma-separated flag's
// strings.Split can be passed as it is.
func NewReserved(names ...string) (Reserved, error) {
	var r Reserved
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if err := validate.Region(n); err != nil { // the same DNS label rule
			return Reserved{}, fmt.Errorf("reserved namespace: %w", err)
		}
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	r.names = slices.Compact(r.names)
	return r, nil
}

// MustReserved is NewReserved for names known to be valid (constants,
// tests); it panics on an invalid one.
func MustReserved(names ...string) Reserved {
	r, err := NewReserved(names...)
	if err != nil {
		panic(err)
	}
	return r
}

// Why says why ns is reserved, and whether it is: "" and false when a
// workspace's environment may have it.
func (r Reserved) Why(ns string) (string, bool) {
	switch {
	case strings.HasPrefix(ns, kubePrefix):
		return `"kube-*" namespaces are Kubernetes' own`, true
	case ns == "default":
		return `"default" is Kubernetes' own`, true
	case strings.HasSuffix(ns, systemSuffix):
		return `"*-system" namespaces are the cluster add-ons' (istio-system, gatekeeper-system, ...)`, true
	case ns == AgentNamespace:
		return "it is the agent's own namespace (deploy/k8s/agentd.yaml)", true
	case slices.Contains(AddOnNamespaces, ns):
		return "it is where a common cluster add-on installs (naming.AddOnNamespaces)", true
	case slices.Contains(r.names, ns):
		return "it is reserved (the agent's own namespace, or listed with --reserved-namespaces)", true
	}
	return "", false
}

// Names are the exact names reserved besides those always reserved,
// sorted.
func (r Reserved) Names() []string { return slices.Clone(r.names) }

// String describes the rule, for logs.
func (r Reserved) String() string {
	always := append([]string{kubePrefix + "*", "*" + systemSuffix, "default", AgentNamespace}, AddOnNamespaces...)
	return strings.Join(append(always, r.names...), ",")
}
