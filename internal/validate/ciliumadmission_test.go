package validate

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/validate/ciliumspec"
)

// admissionSchema is the part of Cilium's CRD schema for
// CiliumNetworkPolicy (cilium.io/v2) that ciliumspec mirrors for admission:
// its patterns, formats, enums, bounds and junctors, as Cilium declares
// them. The rest of a rule is kept as sent.
func admissionSchema() obj {
	str := func(more obj) obj { more["type"] = "string"; return more }
	array := func(items obj) obj { return obj{"type": "array", "items": items} }
	has := func(field string) obj { return obj{"properties": obj{field: obj{}}, "required": arr{field}} }
	selector := obj{"type": "object", "properties": obj{
		"matchLabels": obj{"type": "object", "additionalProperties": str(obj{"maxLength": 63, "pattern": `^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`})},
		"matchExpressions": array(obj{"type": "object", "required": arr{"key", "operator"}, "properties": obj{
			"key":      str(obj{}),
			"operator": str(obj{"enum": arr{"In", "NotIn", "Exists", "DoesNotExist"}}),
			"values":   array(str(obj{})),
		}}),
	}}
	ports := array(obj{"type": "object", "properties": obj{
		"port":     str(obj{"pattern": `^(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})|([a-zA-Z0-9]-?)*[a-zA-Z](-?[a-zA-Z0-9])*$`}),
		"endPort":  obj{"type": "integer", "format": "int32", "minimum": 0, "maximum": 65535},
		"protocol": str(obj{"enum": arr{"TCP", "UDP", "SCTP", "VRRP", "IGMP", "ANY"}}),
	}})
	ports["maxItems"] = 40
	cidrs := array(str(obj{"format": "cidr"}))
	rule := func(peer string) obj {
		return array(obj{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": obj{
			peer + "Endpoints": array(selector),
			peer + "Entities": array(str(obj{"enum": arr{"all", "world", "cluster", "host", "init", "ingress", "unmanaged",
				"remote-node", "health", "none", "kube-apiserver"}})),
			peer + "CIDR": cidrs,
			peer + "CIDRSet": array(obj{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": obj{
				"cidr": str(obj{"format": "cidr"}), "except": cidrs}}),
			"toPorts": array(obj{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": obj{"ports": ports}}),
			"icmps": array(obj{"type": "object", "properties": obj{"fields": obj{"type": "array", "maxItems": 40,
				"items": obj{"type": "object", "required": arr{"type"}, "properties": obj{
					"family": str(obj{"enum": arr{"IPv4", "IPv6"}}),
					"type": obj{"x-kubernetes-int-or-string": true, "anyOf": arr{obj{"type": "integer"}, obj{"type": "string"}},
						"pattern": `^([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5]|` + strings.Join(ciliumICMPTypeNames, "|") + `)$`},
				}}}}}),
		}})
	}
	return obj{"type": "object", "properties": obj{"spec": obj{
		"type": "object", "x-kubernetes-preserve-unknown-fields": true,
		"anyOf": arr{has("ingress"), has("ingressDeny"), has("egress"), has("egressDeny")},
		"oneOf": arr{has("endpointSelector"), has("nodeSelector")},
		"properties": obj{
			"endpointSelector": selector, "nodeSelector": selector,
			"ingress": rule("from"), "ingressDeny": rule("from"), "egress": rule("to"), "egressDeny": rule("to"),
		},
	}}}
}

// ciliumICMPTypeNames are the ICMP type names the pattern of Cilium's CRD
// lists, both families in one list, as it lists them. The CRD writes the
// pattern as a YAML scalar folded over two lines, which put a space into
// one name: "ExtendedEcho Reply", so no policy can name that type.
var ciliumICMPTypeNames = []string{"EchoReply", "DestinationUnreachable", "Redirect", "Echo", "RouterAdvertisement",
	"RouterSelection", "TimeExceeded", "ParameterProblem", "Timestamp", "TimestampReply", "Photuris", "ExtendedEchoRequest",
	"ExtendedEcho Reply", "PacketTooBig", "ParameterProblem", "EchoRequest", "MulticastListenerQuery", "MulticastListenerReport",
	"MulticastListenerDone", "RouterSolicitation", "RouterAdvertisement", "NeighborSolicitation", "NeighborAdvertisement",
	"RedirectMessage", "RouterRenumbering", "ICMPNodeInformationQuery", "ICMPNodeInformationResponse",
	"InverseNeighborDiscoverySolicitation", "InverseNeighborDiscoveryAdvertisement", "HomeAgentAddressDiscoveryRequest",
	"HomeAgentAddressDiscoveryReply", "MobilePrefixSolicitation", "MobilePrefixAdvertisement",
	"DuplicateAddressRequestCodeSuffix", "DuplicateAddressConfirmationCodeSuffix"}

// A real API server with Cilium's admission rules (admissionSchema) agrees
// with ctrld where Cilium's CRD decides, and takes what only Cilium's agent
// refuses: those policies would be stored and applied, and reported in
// sync, had ctrld not refused them.
func TestCiliumPolicySpecAgreesWithAdmission(t *testing.T) {
	cluster := kubetest.StartForTest(t, kubetest.Options{})
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := &unstructured.Unstructured{Object: obj{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": obj{"name": "ciliumnetworkpolicies.cilium.io"},
		"spec": obj{
			"group": "cilium.io", "scope": "Namespaced",
			"names":    obj{"kind": "CiliumNetworkPolicy", "plural": "ciliumnetworkpolicies", "singular": "ciliumnetworkpolicy", "listKind": "CiliumNetworkPolicyList"},
			"versions": arr{obj{"name": "v2", "served": true, "storage": true, "schema": obj{"openAPIV3Schema": admissionSchema()}}},
		},
	}}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policies := dyn.Resource(schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}).Namespace("default")
	admit := func(spec obj) error {
		_, err := policies.Create(ctx, &unstructured.Unstructured{Object: obj{
			"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
			"metadata": obj{"generateName": "p-"}, "spec": spec,
		}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	served := false
	defer func() {
		if !served {
			t.Logf("the last admission: %v", err)
		}
	}()
	eventually.True(t, 15*time.Second, "the CRD was never served", func() bool {
		err = admit(ingress(obj{}))
		return err == nil
	})
	served = true

	for name, spec := range realPolicies(t) {
		if err := admit(spec); err != nil {
			t.Errorf("%s: the API server refused what ctrld accepts: %v", name, err)
		}
	}
	// Every ICMP type name ctrld takes, each in a policy of its own: one
	// the API server refuses would fail every apply of its policy.
	for _, family := range []string{"IPv4", "IPv6"} {
		for _, name := range ciliumspec.ICMPTypeNames(family) {
			spec := ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": name, "family": family}}}}})
			if err := CiliumPolicySpec(spec); err != nil {
				t.Errorf("ICMP type %s of %s: ctrld refused it: %v", name, family, err)
			}
			if err := admit(spec); err != nil {
				t.Errorf("ICMP type %s of %s: the API server refused what ctrld accepts: %v", name, family, err)
			}
		}
	}

	// Refused at admission, and by ctrld, naming the same field.
	for _, c := range []struct {
		name, field string
		spec        obj
	}{
		{"no rule list at all", "", obj{"endpointSelector": api}},
		{"no selector", "endpointSelector", obj{"egress": arr{obj{}}}},
		{"an address, not a CIDR", "fromCIDR[0]", ingress(obj{"fromCIDR": arr{"10.0.0.1"}})},
		{"a mask too long", "toCIDR[0]", egress(obj{"toCIDR": arr{"10.0.0.0/33"}})},
		{"an exception not a CIDR", "except[0]", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/8", "except": arr{"10.1.0.0"}}}})},
		{"protocol in lower case", "protocol", ingress(obj{"toPorts": arr{ports(obj{"port": "80", "protocol": "tcp"})}})},
		{"endPort out of range", "endPort", ingress(obj{"toPorts": arr{ports(obj{"port": "80", "endPort": 70000.0})}})},
		{"port of punctuation", "port", ingress(obj{"toPorts": arr{ports(obj{"port": "!"})}})},
		{"unknown entity", "toEntities[0]", egress(obj{"toEntities": arr{"internet"}})},
		{"world-ipv4", "fromEntities[0]", ingress(obj{"fromEntities": arr{"world-ipv4"}})},
		{"operator", "operator", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "Equals"}}}}})},
		{"label value", "matchLabels.app", obj{"endpointSelector": obj{"matchLabels": obj{"app": "my api"}}, "egress": arr{obj{}}}},
		{"ICMP family", "family", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": 8.0, "family": "IPv5"}}}}})},
		{"ICMP type 256", "type", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": "256"}}}}})},
	} {
		if err := admit(c.spec); !apierrors.IsInvalid(err) {
			t.Errorf("%s: the API server answered %v, want Invalid; the schema here is not Cilium's", c.name, err)
		}
		if err := CiliumPolicySpec(c.spec); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: ctrld got %v, want a refusal naming %s", c.name, err, c.field)
		}
	}

	// Taken at admission, refused by Cilium's agent (or, the last two,
	// taken by both, and not what they seem): only ctrld's check stops
	// them.
	for name, spec := range map[string]obj{
		"a node selector":           {"nodeSelector": obj{}, "ingress": arr{obj{}}},
		"only empty rule lists":     {"endpointSelector": api, "ingress": arr{}, "egress": arr{}},
		"port 70000":                egress(obj{"toPorts": arr{ports(tcp("70000"))}}),
		"a port name of 16":         ingress(obj{"toPorts": arr{ports(obj{"port": "metrics-exporter"})}}),
		"an exception outside":      egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/16", "except": arr{"10.1.0.0/16"}}}}),
		"two kinds of peer":         ingress(obj{"fromEndpoints": arr{obj{}}, "fromCIDR": arr{"10.0.0.0/8"}}),
		"HTTP on UDP":               ingress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "80", "protocol": "UDP"}}, "rules": obj{"http": arr{obj{}}}}}}),
		"DNS rules on ingress":      ingress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "53"}}, "rules": obj{"dns": arr{obj{"matchPattern": "*"}}}}}}),
		"a label key with space":    {"endpointSelector": obj{"matchLabels": obj{"my app": "x"}}, "egress": arr{obj{}}},
		"In without values":         ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "In"}}}}}),
		"ICMPv6 name with IPv4":     ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": "PacketTooBig"}}}}}),
		"from nodes":                ingress(obj{"fromNodes": arr{obj{}}}),
		"port 80/tcp":               ingress(obj{"toPorts": arr{ports(obj{"port": "80/tcp"})}}), // the CRD's pattern is anchored only at one end each way
		"port 010, octal to Cilium": ingress(obj{"toPorts": arr{ports(tcp("010"))}}),
		"endPort below port":        ingress(obj{"toPorts": arr{ports(obj{"port": "8080", "endPort": 80.0})}}),
	} {
		if err := admit(spec); err != nil {
			t.Errorf("%s: the API server refused it (%v); the schema here is not Cilium's", name, err)
		}
		if err := CiliumPolicySpec(spec); err == nil {
			t.Errorf("%s: ctrld took it", name)
		}
	}
}
