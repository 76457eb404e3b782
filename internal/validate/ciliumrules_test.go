package validate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// obj and arr keep the specs below readable.
type obj = map[string]any
type arr = []any

// api selects the pods of app=api, as most of the specs below do.
var api = obj{"matchLabels": obj{"app": "api"}}

// egress is a policy of api with the egress rules given.
func egress(rules ...any) obj { return obj{"endpointSelector": api, "egress": arr(rules)} }

// ingress is a policy of api with the ingress rules given.
func ingress(rules ...any) obj { return obj{"endpointSelector": api, "ingress": arr(rules)} }

// ports is a toPorts entry with the ports given.
func ports(ps ...any) obj { return obj{"ports": arr(ps)} }

// tcp is a TCP port.
func tcp(port string) obj { return obj{"port": port, "protocol": "TCP"} }

// fromJSON reads a spec as ctrld gets it: JSON numbers are float64.
func fromJSON(t *testing.T, s string) obj {
	t.Helper()
	var m obj
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Policies operators write, in the shapes of Cilium's documentation: all
// accepted.
func TestCiliumPolicySpecAcceptsWhatCiliumTakes(t *testing.T) {
	for name, spec := range realPolicies(t) {
		if err := CiliumPolicySpec(spec); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// realPolicies are valid policies of every kind Cilium takes, by name.
func realPolicies(t *testing.T) map[string]obj {
	kubeDNS := obj{"matchLabels": obj{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s-app": "kube-dns"}}
	return map[string]obj{
		"DNS through kube-dns, names logged": egress(obj{
			"toEndpoints": arr{kubeDNS},
			"toPorts": arr{obj{
				"ports": arr{obj{"port": "53", "protocol": "UDP"}, tcp("53")},
				"rules": obj{"dns": arr{obj{"matchPattern": "*"}}},
			}},
		}),
		"FQDNs on 443": egress(obj{
			"toFQDNs": arr{obj{"matchName": "api.stripe.com"}, obj{"matchPattern": "*.amazonaws.com"}, obj{"matchPattern": "**.example.com."}},
			"toPorts": arr{ports(tcp("443"))},
		}),
		"HTTP from the frontend": ingress(obj{
			"fromEndpoints": arr{obj{"matchLabels": obj{"app": "frontend"}}},
			"toPorts": arr{obj{"ports": arr{tcp("8080")}, "rules": obj{"http": arr{
				obj{"method": "GET", "path": "/v1/.*"},
				obj{"method": "POST", "path": "/v1/orders", "headers": arr{"X-Token"},
					"headerMatches": arr{obj{"name": "X-Tenant", "value": "acme", "mismatch": "LOG"}}},
			}}}},
		}),
		"CIDRs with exceptions and a port range": egress(
			obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/8", "except": arr{"10.96.0.0/12", "10.0.0.1/32"}}, obj{"cidr": "2001:db8::/32"}},
				"toPorts": arr{ports(obj{"port": "8000", "endPort": 8100.0, "protocol": "TCP"})}},
			obj{"toCIDR": arr{"192.0.2.1/32", "198.51.100.0/24"}},
			obj{"toCIDRSet": arr{obj{"cidrGroupRef": "partners"}, obj{"cidrGroupSelector": obj{"matchLabels": obj{"team": "payments"}}}}},
		),
		"entities": obj{"endpointSelector": api,
			"ingress": arr{obj{"fromEntities": arr{"world", "cluster", "host", "remote-node", "health", "ingress", "init", "unmanaged", "none", "all"}}},
			"egress":  arr{obj{"toEntities": arr{"kube-apiserver"}, "toPorts": arr{ports(tcp("443"))}}},
		},
		"ICMP echo, by number and by name": ingress(obj{"icmps": arr{obj{"fields": arr{
			obj{"type": 8.0, "family": "IPv4"}, obj{"type": "EchoRequest", "family": "IPv6"}, obj{"type": "0"}, obj{"type": "Echo"},
		}}}}),
		"extended echo: the request by name, the reply by number": ingress(obj{"icmps": arr{obj{"fields": arr{
			obj{"type": "ExtendedEchoRequest", "family": "IPv4"}, obj{"type": 43.0, "family": "IPv4"}, obj{"type": "161", "family": "IPv6"},
		}}}}),
		"deny rules": obj{"endpointSelector": api,
			"ingressDeny": arr{obj{"fromCIDR": arr{"203.0.113.0/24"}}, obj{"fromEntities": arr{"world"}, "toPorts": arr{ports(tcp("22"))}}},
			"egressDeny":  arr{obj{"toEntities": arr{"world"}, "toPorts": arr{ports(tcp("25"), obj{"port": "0", "protocol": "SCTP"})}}},
		},
		// Cilium's default-deny policies: an empty rule allows nothing
		// and turns default deny on for its direction.
		"default deny in":  ingress(obj{}),
		"default deny out": egress(obj{}),
		"audit mode, no default deny": obj{"endpointSelector": api, "enableDefaultDeny": obj{"ingress": false, "egress": false},
			"ingress": arr{obj{"fromEndpoints": arr{obj{}}}}},
		"named ports and any protocol": ingress(obj{"toPorts": arr{ports(obj{"port": "http"}, obj{"port": "metrics-9090", "protocol": "ANY"}, obj{"port": "0"})}}),
		"every selector operator": obj{"endpointSelector": obj{
			"matchLabels": obj{"app.kubernetes.io/name": "api", "reserved:host": "", "$world": ""},
			"matchExpressions": arr{
				obj{"key": "tier", "operator": "In", "values": arr{"web", "api"}},
				obj{"key": "k8s:env", "operator": "NotIn", "values": arr{"dev"}},
				obj{"key": "canary", "operator": "Exists"},
				obj{"key": "legacy", "operator": "DoesNotExist", "values": arr{}},
			}}, "egress": arr{obj{}}},
		"labels, description and log": obj{"endpointSelector": obj{}, "description": "api may reach the database",
			"labels": arr{obj{"key": "team", "value": "payments", "source": "k8s"}}, "log": obj{"value": "payments-db"},
			"egress": arr{obj{"toServices": arr{obj{"k8sService": obj{"serviceName": "db", "namespace": "prod"}},
				obj{"k8sServiceSelector": obj{"selector": obj{"matchLabels": obj{"app": "db"}}}}}, "toPorts": arr{ports(tcp("5432"))}}}},
		"mutual authentication": ingress(obj{"fromEndpoints": arr{obj{}}, "authentication": obj{"mode": "required"}}),
		"TLS interception": egress(obj{"toFQDNs": arr{obj{"matchName": "api.github.com"}}, "toPorts": arr{obj{
			"ports":          arr{tcp("443")},
			"serverNames":    arr{"api.github.com"},
			"terminatingTLS": obj{"secret": obj{"name": "tls-intercept", "namespace": "kube-system"}},
			"originatingTLS": obj{"secret": obj{"name": "ca-bundle"}},
			"rules":          obj{"http": arr{obj{"method": "GET"}}},
		}}}),
		"an Envoy listener": egress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")},
			"listener": obj{"envoyConfig": obj{"kind": "CiliumEnvoyConfig", "name": "lb"}, "name": "http", "priority": 10.0}}}}),
		"VRRP on port 0": ingress(obj{"toPorts": arr{ports(obj{"port": "0", "protocol": "VRRP"})}}),
		"as JSON": fromJSON(t, `{"endpointSelector":{"matchLabels":{"app":"api"}},
			"egress":[{"toPorts":[{"ports":[{"port":"6000","endPort":6010,"protocol":"UDP"}]}]}]}`),
	}
}

// Each spec Cilium refuses (by its CRD at admission, or by its agent when
// it reads the policy), refused with the field named; one case per rule.
func TestCiliumPolicySpecRefusesWhatCiliumRefuses(t *testing.T) {
	long := strings.Repeat("k", 60)
	icmpFields := make(arr, 41)
	for i := range icmpFields {
		icmpFields[i] = obj{"type": 8.0}
	}
	tooManyPorts := make(arr, 41)
	for i := range tooManyPorts {
		tooManyPorts[i] = tcp(fmt.Sprint(1000 + i))
	}
	for _, c := range []struct {
		name string
		spec obj
		want string // the whole message, or a part naming field and reason
	}{
		// The rule as a whole.
		{"node selector on a namespaced policy", obj{"nodeSelector": obj{"matchExpressions": arr{obj{"key": "zone", "operator": "Exists"}}}, "ingress": arr{obj{}}},
			`nodeSelector: a namespaced CiliumNetworkPolicy cannot select nodes (Cilium refuses it: "rule cannot have NodeSelector"`},
		{"node and endpoint selector", obj{"endpointSelector": api, "nodeSelector": obj{}, "egress": arr{obj{}}}, "nodeSelector: a namespaced CiliumNetworkPolicy cannot select nodes"},
		{"no rule at all", obj{"endpointSelector": api}, "has no rule: Cilium requires at least one ingress, ingressDeny, egress or egressDeny rule"},
		{"only empty lists", obj{"endpointSelector": api, "ingress": arr{}, "ingressDeny": arr{}, "egress": arr{}, "egressDeny": arr{}}, "has no rule:"},
		{"no endpoint selector", obj{"egress": arr{obj{}}}, "needs endpointSelector: Cilium requires one"},
		{"default deny not a boolean", obj{"endpointSelector": api, "egress": arr{obj{}}, "enableDefaultDeny": obj{"egress": "false"}}, "enableDefaultDeny.egress: must be a boolean, got a string"},
		{"default deny for nothing", obj{"endpointSelector": api, "egress": arr{obj{}}, "enableDefaultDeny": obj{"all": true}}, `enableDefaultDeny: "all" is not a field of a default-deny setting (egress, ingress)`},
		{"a label without key", obj{"endpointSelector": api, "egress": arr{obj{}}, "labels": arr{obj{"value": "x"}}}, "labels[0]: a label needs key"},
		{"a label with an empty key", obj{"endpointSelector": api, "egress": arr{obj{}}, "labels": arr{obj{"key": ""}}}, "labels[0].key: must not be empty"},
		{"log value too long", obj{"endpointSelector": api, "egress": arr{obj{}}, "log": obj{"value": strings.Repeat("x", 33)}}, "log.value: " + `"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" is 33 characters long, at most 32 allowed`},
		{"log value with a control character", obj{"endpointSelector": api, "egress": arr{obj{}}, "log": obj{"value": "a\x1b[2J"}}, "log.value: \"a\\x1b[2J\" holds a control or format character"},

		// Label selectors.
		{"label key with a space", obj{"endpointSelector": obj{"matchLabels": obj{"my app": "x"}}, "egress": arr{obj{}}},
			`endpointSelector.matchLabels["my app"]: "my app" is not a valid label key: Cilium reads it as "any.my app", which has a name that is not alphanumerics`},
		{"label key too long once Cilium adds any.", obj{"endpointSelector": obj{"matchLabels": obj{long: "x"}}, "egress": arr{obj{}}},
			`is not a valid label key: Cilium reads it as "any.` + long + `", which has a name of 64 characters, at most 63 allowed`},
		{"label key with an upper-case prefix", obj{"endpointSelector": obj{"matchLabels": obj{"Acme.com/app": "x"}}, "egress": arr{obj{}}}, "which has a prefix that is not a DNS subdomain"},
		{"label value with a space", obj{"endpointSelector": obj{"matchLabels": obj{"app": "my api"}}, "egress": arr{obj{}}}, `endpointSelector.matchLabels.app: "my api" is not a valid label value`},
		{"label value too long", obj{"endpointSelector": obj{"matchLabels": obj{"app": strings.Repeat("a", 64)}}, "egress": arr{obj{}}}, "endpointSelector.matchLabels.app: " + `"` + strings.Repeat("a", 64)[:64] + `" is not a valid label value: 64 characters, at most 63 allowed`},
		{"label value a number", obj{"endpointSelector": obj{"matchLabels": obj{"port": 80.0}}, "egress": arr{obj{}}}, "endpointSelector.matchLabels.port: must be a string, got a number"},
		{"labels at the selector's top", obj{"endpointSelector": obj{"app": "api"}, "egress": arr{obj{}}}, `endpointSelector: "app" is not a field of an endpoint selector (matchExpressions, matchLabels)`},
		{"operator Cilium does not know", egress(obj{"toEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "Equals", "values": arr{"x"}}}}}}),
			`egress[0].toEndpoints[0].matchExpressions[0].operator: "Equals" is not one of In, NotIn, Exists, DoesNotExist`},
		{"In without values", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "In"}}}}}),
			"ingress[0].fromEndpoints[0].matchExpressions[0].values: must hold at least one value for operator In"},
		{"Exists with values", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "Exists", "values": arr{"x"}}}}}}),
			"ingress[0].fromEndpoints[0].matchExpressions[0].values: must be empty for operator Exists"},
		{"requirement without key", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"operator": "Exists"}}}}}),
			"ingress[0].fromEndpoints[0].matchExpressions[0]: a requirement needs key"},
		{"requirement value invalid", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app", "operator": "In", "values": arr{"a/b"}}}}}}),
			`ingress[0].fromEndpoints[0].matchExpressions[0].values[0]: "a/b" is not a valid label value`},
		{"requirement key invalid", ingress(obj{"fromEndpoints": arr{obj{"matchExpressions": arr{obj{"key": "app-", "operator": "Exists"}}}}}),
			`ingress[0].fromEndpoints[0].matchExpressions[0].key: "app-" is not a valid label key`},

		// Rules and their peers.
		{"a field Cilium does not have", egress(obj{"toPort": arr{ports(tcp("80"))}}), `egress[0]: "toPort" is not a field of an egress rule (authentication, icmps, toCIDR,`},
		{"endpoints and CIDRs in one rule", ingress(obj{"fromEndpoints": arr{obj{}}, "fromCIDR": arr{"10.0.0.0/8"}}),
			"ingress[0]: combines fromEndpoints and fromCIDR, which Cilium does not support in one rule: write one rule for each"},
		{"FQDNs and entities in one rule", egress(obj{"toEntities": arr{"world"}, "toFQDNs": arr{obj{"matchName": "example.com"}}}), "egress[0]: combines toEntities and toFQDNs"},
		{"ICMPs and ports in one rule", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": 8.0}}}}, "toPorts": arr{ports(tcp("80"))}}),
			"ingress[0]: has both icmps and toPorts, which Cilium does not take in one rule"},
		{"from nodes", ingress(obj{"fromNodes": arr{obj{}}}), "ingress[0].fromNodes: needs Cilium's --enable-node-selector-labels, off by default"},
		{"to nodes, deny", obj{"endpointSelector": api, "egressDeny": arr{obj{"toNodes": arr{obj{}}}}}, "egressDeny[0].toNodes: needs Cilium's --enable-node-selector-labels"},
		{"fromRequires", ingress(obj{"fromRequires": arr{"app=x"}}), "ingress[0].fromRequires: is deprecated: Cilium's CRD takes no entries"},
		{"unknown entity", egress(obj{"toEntities": arr{"world", "internet"}}),
			`egress[0].toEntities[1]: "internet" is not one of all, world, cluster, host, init, ingress, unmanaged, remote-node, health, none, kube-apiserver`},
		{"entity outside the CRD's list", ingress(obj{"fromEntities": arr{"world-ipv4"}}), `ingress[0].fromEntities[0]: "world-ipv4" is not one of`},
		{"CIDR out of range", egress(obj{"toCIDR": arr{"10.0.0.0/33"}}), `egress[0].toCIDR[0]: "10.0.0.0/33" is not a CIDR (an address and a prefix length`},
		{"an address, not a CIDR", ingress(obj{"fromCIDR": arr{"10.0.0.1"}}), `ingress[0].fromCIDR[0]: "10.0.0.1" is not a CIDR (an address and a prefix length, such as 10.0.0.0/8 or 2001:db8::/32); the address alone is 10.0.0.1/32`},
		{"CIDR rule's CIDR", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0/8"}}}), `egress[0].toCIDRSet[0].cidr: "10.0.0/8" is not a CIDR`},
		{"exception outside its CIDR", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/16", "except": arr{"10.0.1.0/24", "10.1.0.0/16"}}}}),
			"egress[0].toCIDRSet[0].except[1]: 10.1.0.0/16 is not inside cidr 10.0.0.0/16: Cilium takes only exceptions within the allowed CIDR"},
		{"exception wider than its CIDR", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/16", "except": arr{"10.0.0.0/8"}}}}), "egress[0].toCIDRSet[0].except[0]: 10.0.0.0/8 is not inside cidr 10.0.0.0/16"},
		{"exception of another family", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/8", "except": arr{"2001:db8::/64"}}}}), "egress[0].toCIDRSet[0].except[0]: 2001:db8::/64 is not inside cidr 10.0.0.0/8"},
		{"CIDR rule with a CIDR and a group", egress(obj{"toCIDRSet": arr{obj{"cidr": "10.0.0.0/8", "cidrGroupRef": "partners"}}}),
			"egress[0].toCIDRSet[0]: a CIDR rule takes only one of cidr, cidrGroupRef, cidrGroupSelector, got cidr and cidrGroupRef"},
		{"CIDR rule with neither", egress(obj{"toCIDRSet": arr{obj{"except": arr{"10.0.0.0/8"}}}}), "egress[0].toCIDRSet[0]: a CIDR rule needs one of cidr, cidrGroupRef, cidrGroupSelector"},
		{"CIDR group name", egress(obj{"toCIDRSet": arr{obj{"cidrGroupRef": "Partners"}}}), `egress[0].toCIDRSet[0].cidrGroupRef: "Partners" is not a CiliumCIDRGroup name`},
		{"FQDN with both", egress(obj{"toFQDNs": arr{obj{"matchName": "a.com", "matchPattern": "*.a.com"}}}),
			"egress[0].toFQDNs[0]: an FQDN selector takes only one of matchName, matchPattern, got matchName and matchPattern"},
		{"FQDN with neither", egress(obj{"toFQDNs": arr{obj{}}}), "egress[0].toFQDNs[0]: an FQDN selector needs one of matchName, matchPattern"},
		{"FQDN name with a path", egress(obj{"toFQDNs": arr{obj{"matchName": "example.com/login"}}}), `egress[0].toFQDNs[0].matchName: "example.com/login" is not a DNS name`},
		{"FQDN in a deny rule", obj{"endpointSelector": api, "egressDeny": arr{obj{"toFQDNs": arr{obj{"matchName": "a.com"}}}}}, `egressDeny[0]: "toFQDNs" is not a field of an egress deny rule`},
		{"authentication mode", ingress(obj{"authentication": obj{"mode": "mtls"}}), `ingress[0].authentication.mode: "mtls" is not one of disabled, required, test-always-fail`},
		{"service selector without selector", egress(obj{"toServices": arr{obj{"k8sServiceSelector": obj{"namespace": "prod"}}}}),
			"egress[0].toServices[0].k8sServiceSelector: a Kubernetes service selector needs selector"},
		{"a rule not an object", egress(obj{}, "x"), "egress[1]: must be an egress rule (an object), got a string"},

		// Ports and protocols.
		{"port out of range", egress(obj{"toPorts": arr{ports(tcp("80"), tcp("70000"))}}), `egress[0].toPorts[0].ports[1].port: "70000" is not a port: a port number is 0..65535`},
		{"port name with an underscore", ingress(obj{"toPorts": arr{ports(obj{"port": "http_alt"})}}), `ingress[0].toPorts[0].ports[0].port: "http_alt" is not a port: a port is a number 0..65535 or a port name`},
		{"port name of 16 characters", ingress(obj{"toPorts": arr{ports(obj{"port": "metrics-exporter"})}}), `ingress[0].toPorts[0].ports[0].port: "metrics-exporter" is not a port`},
		{"port with a leading zero", ingress(obj{"toPorts": arr{ports(tcp("080"))}}), `ingress[0].toPorts[0].ports[0].port: "080" is not a port: write it in decimal without leading zeros`},
		{"port empty", ingress(obj{"toPorts": arr{ports(obj{"port": "", "protocol": "TCP"})}}), `ingress[0].toPorts[0].ports[0].port: must not be empty: Cilium requires a port`},
		{"port left out", ingress(obj{"toPorts": arr{ports(obj{"protocol": "TCP"})}}), `ingress[0].toPorts[0].ports[0].port: must be given: Cilium requires a port`},
		{"port a number", ingress(obj{"toPorts": arr{ports(obj{"port": 80.0})}}), "ingress[0].toPorts[0].ports[0].port: must be a string, got a number"},
		{"protocol in lower case", ingress(obj{"toPorts": arr{ports(obj{"port": "80", "protocol": "tcp"})}}),
			`ingress[0].toPorts[0].ports[0].protocol: "tcp" is not one of TCP, UDP, SCTP, VRRP, IGMP, ANY`},
		{"protocol ICMP in ports", ingress(obj{"toPorts": arr{ports(obj{"port": "0", "protocol": "ICMP"})}}), `ingress[0].toPorts[0].ports[0].protocol: "ICMP" is not one of`},
		{"endPort out of range", ingress(obj{"toPorts": arr{ports(obj{"port": "80", "endPort": 70000.0})}}), "ingress[0].toPorts[0].ports[0].endPort: 70000 is out of range 0..65535"},
		{"endPort below port", ingress(obj{"toPorts": arr{ports(obj{"port": "8080", "endPort": 80.0})}}), "ingress[0].toPorts[0].ports[0].endPort: 80 is below port 8080: a range runs from port up to endPort"},
		{"endPort a fraction", ingress(obj{"toPorts": arr{ports(obj{"port": "80", "endPort": 80.5})}}), "ingress[0].toPorts[0].ports[0].endPort: 80.5 is not a whole number"},
		{"41 ports", ingress(obj{"toPorts": arr{ports(tooManyPorts...)}}), "ingress[0].toPorts[0].ports: has 41 ports, at most 40 allowed"},
		{"41 deny ports", obj{"endpointSelector": api, "ingressDeny": arr{obj{"toPorts": arr{ports(tooManyPorts...)}}}}, "ingressDeny[0].toPorts[0].ports: has 41 ports, at most 40 allowed"},
		{"VRRP with a port", ingress(obj{"toPorts": arr{ports(obj{"port": "112", "protocol": "VRRP"})}}), `ingress[0].toPorts[0].ports[0].port: VRRP has no ports: Cilium takes only port "0" with it`},

		// L7 rules.
		{"HTTP on UDP", ingress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "80", "protocol": "UDP"}}, "rules": obj{"http": arr{obj{}}}}}}),
			"ingress[0].toPorts[0].ports[0].protocol: L7 rules other than DNS apply only to TCP; Cilium refuses them with protocol UDP: give protocol TCP"},
		{"HTTP without protocol", ingress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "80"}}, "rules": obj{"http": arr{obj{}}}}}}),
			"ingress[0].toPorts[0].ports[0].protocol: L7 rules other than DNS apply only to TCP; Cilium refuses them with protocol none, so any"},
		{"HTTP on port 0", ingress(obj{"toPorts": arr{obj{"ports": arr{tcp("0")}, "rules": obj{"http": arr{obj{}}}}}}),
			"ingress[0].toPorts[0].ports[0].port: L7 rules cannot be used with port 0 (all ports)"},
		{"DNS rules on ingress", ingress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "53", "protocol": "UDP"}}, "rules": obj{"dns": arr{obj{"matchPattern": "*"}}}}}}),
			"ingress[0].toPorts[0].rules.dns: DNS rules are not allowed on ingress"},
		{"DNS rules without ports", egress(obj{"toPorts": arr{obj{"rules": obj{"dns": arr{obj{"matchPattern": "*"}}}}}}),
			"egress[0].toPorts[0].ports: DNS rules need their port (53) listed"},
		{"DNS rules on a range", egress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "53", "endPort": 54.0, "protocol": "UDP"}}, "rules": obj{"dns": arr{obj{"matchPattern": "*"}}}}}}),
			"egress[0].toPorts[0].ports[0].endPort: DNS rules do not support port ranges"},
		{"DNS pattern with a slash", egress(obj{"toPorts": arr{obj{"ports": arr{obj{"port": "53"}}, "rules": obj{"dns": arr{obj{"matchPattern": "*/x"}}}}}}),
			`egress[0].toPorts[0].rules.dns[0].matchPattern: "*/x" is not a DNS name pattern`},
		{"empty L7 rules", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{}}}}), "egress[0].toPorts[0].rules: an L7 rule set needs one of http, dns"},
		{"HTTP and DNS rules", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("53")}, "rules": obj{"http": arr{}, "dns": arr{}}}}}),
			"egress[0].toPorts[0].rules: an L7 rule set takes only one of http, dns, got http and dns"},
		{"Kafka rules", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("9092")}, "rules": obj{"kafka": arr{obj{"topic": "orders"}}}}}}),
			`egress[0].toPorts[0].rules: "kafka" is not a field of an L7 rule set (dns, http)`},
		{"HTTP path not a regular expression", ingress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{"http": arr{obj{"path": "/v1/(orders"}}}}}}),
			`ingress[0].toPorts[0].rules.http[0].path: "/v1/(orders" is not a regular expression: missing closing )`},
		{"header match without name", ingress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{"http": arr{obj{"headerMatches": arr{obj{"value": "x"}}}}}}}}),
			"ingress[0].toPorts[0].rules.http[0].headerMatches[0]: a header match needs name"},
		{"header mismatch action", ingress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{"http": arr{obj{"headerMatches": arr{obj{"name": "X", "mismatch": "DROP"}}}}}}}}),
			`ingress[0].toPorts[0].rules.http[0].headerMatches[0].mismatch: "DROP" is not one of LOG, ADD, DELETE, REPLACE`},
		{"L7 rules in a deny rule", obj{"endpointSelector": api, "ingressDeny": arr{obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{"http": arr{}}}}}}},
			`ingressDeny[0].toPorts[0]: "rules" is not a field of a deny port rule (ports)`},
		{"listener on ingress", ingress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "listener": obj{"envoyConfig": obj{"name": "lb"}, "name": "http"}}}}),
			"ingress[0].toPorts[0].listener: Cilium takes a listener only in egress rules"},
		{"listener with L7 rules", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "rules": obj{"http": arr{}}, "listener": obj{"envoyConfig": obj{"name": "lb"}, "name": "http"}}}}),
			"egress[0].toPorts[0].listener: Cilium does not take a listener with L7 rules"},
		{"listener priority", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("80")}, "listener": obj{"envoyConfig": obj{"name": "lb"}, "name": "http", "priority": 0.0}}}}),
			"egress[0].toPorts[0].listener.priority: 0 is out of range 1..100"},
		{"server names with L7 rules, no TLS termination", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("443")}, "serverNames": arr{"a.com"}, "rules": obj{"http": arr{}}}}}),
			"egress[0].toPorts[0].serverNames: with L7 rules, Cilium takes server names only with terminatingTLS"},
		{"server names empty", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("443")}, "serverNames": arr{}}}}), "egress[0].toPorts[0].serverNames: must hold at least one server name, or be left out"},
		{"server name empty", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("443")}, "serverNames": arr{""}}}}), `egress[0].toPorts[0].serverNames[0]: "" is not a DNS name pattern`},
		{"server name twice", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("443")}, "serverNames": arr{"a.com", "a.com"}}}}), `egress[0].toPorts[0].serverNames[1]: "a.com" is listed twice`},
		{"TLS context without secret", egress(obj{"toPorts": arr{obj{"ports": arr{tcp("443")}, "originatingTLS": obj{"trustedCA": "ca.crt"}}}}), "egress[0].toPorts[0].originatingTLS: a TLS context needs secret"},

		// ICMP.
		{"ICMP family", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": 8.0, "family": "IPv5"}}}}}), `ingress[0].icmps[0].fields[0].family: "IPv5" is not one of IPv4, IPv6`},
		{"ICMP type 256", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": 256.0}}}}}), "ingress[0].icmps[0].fields[0].type: 256 is out of range 0..255"},
		{"ICMP type 256 as a string", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": "256"}}}}}), "ingress[0].icmps[0].fields[0].type: 256 is not an ICMP type: 0..255"},
		{"ICMPv6 type name with IPv4", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": "PacketTooBig"}}}}}),
			`ingress[0].icmps[0].fields[0].type: "PacketTooBig" is not an ICMP type of IPv4 (a number 0..255, or one of EchoReply,`},
		{"ExtendedEchoReply by name", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"type": "ExtendedEchoReply", "family": "IPv6"}}}}}),
			`ingress[0].icmps[0].fields[0].type: "ExtendedEchoReply" is a name Cilium's CRD refuses (its pattern has a space in it); write the number: 161`},
		{"ICMP field without type", ingress(obj{"icmps": arr{obj{"fields": arr{obj{"family": "IPv4"}}}}}), "ingress[0].icmps[0].fields[0]: an ICMP field needs type"},
		{"41 ICMP fields", ingress(obj{"icmps": arr{obj{"fields": icmpFields}}}), "ingress[0].icmps[0].fields: has 41 ICMP fields, at most 40 allowed"},
	} {
		err := CiliumPolicySpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
