package ciliumspec

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
)

// Check checks spec, the .spec of a namespaced CiliumNetworkPolicy, as
// Cilium's CRD and its agent do (see the package doc). Its error names the
// field, by its path in the spec: egress[0].toPorts[0].ports[1].port.
//
// spec is JSON-shaped (maps, slices, strings, float64 numbers, booleans)
// and, as validate.CiliumPolicySpec has made sure, holds no null below its
// top fields and no NaN or infinity, and is within the size limit: Check's
// work grows with the spec's size.
func Check(spec map[string]any) error {
	if err := policySpec(spec); err != nil {
		return err
	}
	return httpRegexps(spec)
}

// policySpec is Cilium's Rule, the spec of a CiliumNetworkPolicy.
var policySpec = object("CiliumNetworkPolicy spec", fields{
	"description":       anyString,
	"endpointSelector":  endpointSelector,
	"nodeSelector":      noNodeSelector,
	"ingress":           list("ingress rule", 0, ingressRule),
	"ingressDeny":       list("ingress deny rule", 0, ingressDenyRule),
	"egress":            list("egress rule", 0, egressRule),
	"egressDeny":        list("egress deny rule", 0, egressDenyRule),
	"enableDefaultDeny": object("default-deny setting", fields{"ingress": boolean, "egress": boolean}),
	"labels": list("label", 0, object("label", fields{
		"key":    str(notEmpty),
		"source": anyString,
		"value":  anyString,
	}, required("a label", "key"))),
	"log": object("log setting", fields{"value": str(logValue)}),
}, selectsEndpoints, hasRules)

// noNodeSelector refuses the field: Cilium's Parse of a namespaced policy
// does, whatever the selector.
func noNodeSelector(any) error {
	return errors.New(`a namespaced CiliumNetworkPolicy cannot select nodes (Cilium refuses it: "rule cannot have NodeSelector"; only a CiliumClusterwideNetworkPolicy can); select endpoints with endpointSelector`)
}

func selectsEndpoints(spec map[string]any) error {
	if _, ok := spec["endpointSelector"]; !ok {
		return errors.New("needs endpointSelector: Cilium requires one, to know which endpoints the policy applies to ({} selects every endpoint in the namespace)")
	}
	return nil
}

// hasRules is Cilium's "rule must have at least one of Ingress,
// IngressDeny, Egress, EgressDeny": an empty list counts as none (the CRD
// lets `ingress: []` through; the agent refuses it).
func hasRules(spec map[string]any) error {
	for _, direction := range []string{"ingress", "ingressDeny", "egress", "egressDeny"} {
		if count(spec, direction) > 0 {
			return nil
		}
	}
	return errors.New("has no rule: Cilium requires at least one ingress, ingressDeny, egress or egressDeny rule, and an empty list has none " +
		"(an empty rule is one: `ingress: [{}]` allows nothing in and puts the selected endpoints into default deny)")
}

func notEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// printable is the CRD's pattern for a log value: no control, format,
// private-use, surrogate or unassigned characters.
var printable = regexp.MustCompile(`^\PC*$`)

func logValue(s string) error {
	switch {
	case len([]rune(s)) > 32:
		return fmt.Errorf("%s is %d characters long, at most 32 allowed", quote(s), len([]rune(s)))
	case !printable.MatchString(s):
		return fmt.Errorf("%s holds a control or format character; Hubble takes printable characters only", quote(s))
	}
	return nil
}

// The peers an ingress or egress rule may name; Cilium takes only one kind
// per rule.
var (
	ingressPeers = []string{"fromEndpoints", "fromCIDR", "fromCIDRSet", "fromEntities", "fromNodes", "fromGroups"}
	egressPeers  = []string{"toEndpoints", "toCIDR", "toCIDRSet", "toEntities", "toServices", "toGroups", "toNodes"}
)

// ingressRule is Cilium's IngressRule.
var ingressRule = object("ingress rule", fields{
	"authentication": authentication,
	"fromCIDR":       list("CIDR", 0, str(cidr)),
	"fromCIDRSet":    list("CIDR rule", 0, cidrRule),
	"fromEndpoints":  list("endpoint selector", 0, endpointSelector),
	"fromEntities":   list("entity", 0, entity),
	"fromGroups":     list("group", 0, group),
	"fromNodes":      nodeSelectors,
	"fromRequires":   deprecated,
	"icmps":          list("ICMP rule", 0, icmpRule),
	"toPorts":        list("port rule", 0, portRule(true)),
}, onePeerKind(ingressPeers...), icmpsWithoutPorts)

// ingressDenyRule is Cilium's IngressDenyRule: no authentication, and port
// rules without L7.
var ingressDenyRule = object("ingress deny rule", fields{
	"fromCIDR":      list("CIDR", 0, str(cidr)),
	"fromCIDRSet":   list("CIDR rule", 0, cidrRule),
	"fromEndpoints": list("endpoint selector", 0, endpointSelector),
	"fromEntities":  list("entity", 0, entity),
	"fromGroups":    list("group", 0, group),
	"fromNodes":     nodeSelectors,
	"fromRequires":  deprecated,
	"icmps":         list("ICMP rule", 0, icmpRule),
	"toPorts":       list("port rule", 0, portDenyRule),
}, onePeerKind(ingressPeers...), icmpsWithoutPorts)

// egressRule is Cilium's EgressRule.
var egressRule = object("egress rule", fields{
	"authentication": authentication,
	"icmps":          list("ICMP rule", 0, icmpRule),
	"toCIDR":         list("CIDR", 0, str(cidr)),
	"toCIDRSet":      list("CIDR rule", 0, cidrRule),
	"toEndpoints":    list("endpoint selector", 0, endpointSelector),
	"toEntities":     list("entity", 0, entity),
	"toFQDNs":        list("FQDN selector", 0, fqdnSelector),
	"toGroups":       list("group", 0, group),
	"toNodes":        nodeSelectors,
	"toPorts":        list("port rule", 0, portRule(false)),
	"toRequires":     deprecated,
	"toServices":     list("service", 0, service),
}, onePeerKind(append(egressPeers, "toFQDNs")...), icmpsWithoutPorts)

// egressDenyRule is Cilium's EgressDenyRule: no authentication, no FQDNs,
// and port rules without L7.
var egressDenyRule = object("egress deny rule", fields{
	"icmps":       list("ICMP rule", 0, icmpRule),
	"toCIDR":      list("CIDR", 0, str(cidr)),
	"toCIDRSet":   list("CIDR rule", 0, cidrRule),
	"toEndpoints": list("endpoint selector", 0, endpointSelector),
	"toEntities":  list("entity", 0, entity),
	"toGroups":    list("group", 0, group),
	"toNodes":     nodeSelectors,
	"toPorts":     list("port rule", 0, portDenyRule),
	"toRequires":  deprecated,
	"toServices":  list("service", 0, service),
}, onePeerKind(egressPeers...), icmpsWithoutPorts)

// onePeerKind is Cilium's "combining X and Y is not supported yet".
func onePeerKind(peers ...string) func(rule map[string]any) error {
	return func(rule map[string]any) error {
		var have []string
		for _, p := range peers {
			if count(rule, p) > 0 {
				have = append(have, p)
			}
		}
		if len(have) > 1 {
			return fmt.Errorf("combines %s and %s, which Cilium does not support in one rule: write one rule for each", have[0], have[1])
		}
		return nil
	}
}

func icmpsWithoutPorts(rule map[string]any) error {
	if count(rule, "icmps") > 0 && count(rule, "toPorts") > 0 {
		return errors.New("has both icmps and toPorts, which Cilium does not take in one rule: write one rule for each")
	}
	return nil
}

// nodeSelectors is fromNodes or toNodes. Cilium refuses a rule with either
// unless its agents run with --enable-node-selector-labels, off by default.
func nodeSelectors(v any) error {
	if err := list("node selector", 0, endpointSelector)(v); err != nil {
		return err
	}
	if len(v.([]any)) > 0 {
		return errors.New("needs Cilium's --enable-node-selector-labels, off by default, without which Cilium refuses the rule; " +
			"select nodes with the entities host and remote-node instead")
	}
	return nil
}

// deprecated is fromRequires or toRequires, which the CRD declares with
// at most 0 items.
func deprecated(v any) error {
	if err := list("label", 0, anyString)(v); err != nil {
		return err
	}
	if len(v.([]any)) > 0 {
		return errors.New("is deprecated: Cilium's CRD takes no entries; list the requirement in the rule's selectors")
	}
	return nil
}

var authentication = object("authentication", fields{
	"mode": enum("disabled", "required", "test-always-fail"),
}, required("authentication", "mode"))

// entity is one of the CRD's entities. Cilium knows world-ipv4 and
// world-ipv6 too, but its CRD does not let them through.
var entity = enum("all", "world", "cluster", "host", "init", "ingress", "unmanaged", "remote-node", "health", "none", "kube-apiserver")

// cidr is the CRD's format "cidr" (Go's net.ParseCIDR, as the API server
// checks it) and Cilium's own parse (netip.ParsePrefix). A bare address,
// which Cilium alone would take, the CRD refuses.
func cidr(s string) error {
	_, _, err := net.ParseCIDR(s)
	if _, perr := netip.ParsePrefix(s); err != nil || perr != nil {
		hint := ""
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			hint = fmt.Sprintf("; the address alone is %s", netip.PrefixFrom(a, a.BitLen()))
		}
		return fmt.Errorf("%s is not a CIDR (an address and a prefix length, such as 10.0.0.0/8 or 2001:db8::/32)%s", quote(s), hint)
	}
	return nil
}

// cidrRule is Cilium's CIDRRule: a CIDR with exceptions inside it, or a
// reference to CiliumCIDRGroups by name or by labels.
var cidrRule = object("CIDR rule", fields{
	"cidr":              str(cidr),
	"cidrGroupRef":      str(func(s string) error { return subdomainName("CiliumCIDRGroup name", s) }),
	"cidrGroupSelector": cidrGroupSelector,
	"except":            list("CIDR", 0, str(cidr)),
}, exactlyOne("a CIDR rule", "cidr", "cidrGroupRef", "cidrGroupSelector"), exceptionsInside)

// exceptionsInside is Cilium's check that each exception is a prefix
// inside the rule's CIDR (and so of its address family). Cilium ignores
// the exceptions of a CIDR group, so does this.
func exceptionsInside(rule map[string]any) error {
	s, ok := rule["cidr"].(string)
	if !ok {
		return nil
	}
	allowed := netip.MustParsePrefix(s) // cidr has been checked
	exceptions, _ := rule["except"].([]any)
	for i, e := range exceptions {
		except := netip.MustParsePrefix(e.(string))
		if except.Bits() < allowed.Bits() || !allowed.Contains(except.Addr()) {
			return at(field("except"), at(index(i), fmt.Errorf("%s is not inside cidr %s: Cilium takes only exceptions within the allowed CIDR", except, allowed)))
		}
	}
	return nil
}

func subdomainName(what, s string) error {
	if err := Subdomain(s); err != nil || s == "" {
		return fmt.Errorf("%s is not a %s: a DNS subdomain (lowercase alphanumerics and '-', dot-separated, at most 253 characters)", quote(s), what)
	}
	return nil
}

var group = object("group", fields{
	"aws": object("AWS group", fields{
		"labels":              stringMap(anyKey, anyString),
		"region":              anyString,
		"securityGroupsIds":   list("security group ID", 0, anyString),
		"securityGroupsNames": list("security group name", 0, anyString),
	}),
})

var service = object("service", fields{
	"k8sService": object("Kubernetes service reference", fields{
		"namespace":   anyString,
		"serviceName": anyString,
	}),
	"k8sServiceSelector": object("Kubernetes service selector", fields{
		"namespace": anyString,
		"selector":  endpointSelector,
	}, required("a Kubernetes service selector", "selector")),
})

// DNS names and patterns as the CRD takes them, in toFQDNs and in DNS
// rules: labels of letters, digits, '-' and '_' (and '*' in a pattern),
// dot-separated, a trailing dot allowed.
var (
	dnsNamePattern  = regexp.MustCompile(`^([-a-zA-Z0-9_]+[.]?)+$`)
	dnsMatchPattern = regexp.MustCompile(`^([-a-zA-Z0-9_*]+[.]?)+$`)
)

func dnsName(s string) error {
	if len(s) > 255 || !dnsNamePattern.MatchString(s) {
		return fmt.Errorf("%s is not a DNS name (letters, digits, '-' and '_', dot-separated, at most 255 characters)", quote(s))
	}
	return nil
}

func dnsPattern(s string) error {
	if len(s) > 255 || !dnsMatchPattern.MatchString(s) {
		return fmt.Errorf("%s is not a DNS name pattern (letters, digits, '-', '_' and '*', dot-separated, at most 255 characters)", quote(s))
	}
	return nil
}

// fqdnSelector is Cilium's FQDNSelector (toFQDNs), and its PortRuleDNS.
var fqdnSelector = object("FQDN selector", fields{
	"matchName":    str(dnsName),
	"matchPattern": str(dnsPattern),
}, exactlyOne("an FQDN selector", "matchName", "matchPattern"))
