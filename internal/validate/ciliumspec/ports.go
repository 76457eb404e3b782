package ciliumspec

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxPorts is Cilium's bound on the ports of one port rule (maxPorts in
// rule_validation.go, maxItems in the CRD), and on an ICMP rule's fields.
const maxPorts = 40

// portRule is Cilium's PortRule, of an ingress rule or of an egress rule:
// ports, optionally with L7 rules, TLS and a listener.
func portRule(ingress bool) check {
	return object("port rule", fields{
		"listener":       listener,
		"originatingTLS": tlsContext,
		"ports":          list("port", maxPorts, portProtocol),
		"rules":          l7Rules,
		"serverNames":    unique(nonEmpty("server name", list("server name", 0, str(dnsPattern)))),
		"terminatingTLS": tlsContext,
	}, portRuleAcross(ingress))
}

// portDenyRule is Cilium's PortDenyRule: ports only.
var portDenyRule = object("deny port rule", fields{
	"ports": list("port", maxPorts, portProtocol),
})

// portRuleAcross is Cilium's (*PortRule).Validate beyond each field: where
// L7 rules, server names and listeners may be.
func portRuleAcross(ingress bool) func(rule map[string]any) error {
	return func(rule map[string]any) error {
		l7, hasL7 := rule["rules"].(map[string]any)
		_, dns := l7["dns"]
		if ingress && dns {
			return at(field("rules"), at(field("dns"), errors.New("DNS rules are not allowed on ingress: Cilium takes them only in egress rules")))
		}
		if count(rule, "serverNames") > 0 && hasL7 && rule["terminatingTLS"] == nil {
			return at(field("serverNames"), errors.New("with L7 rules, Cilium takes server names only with terminatingTLS"))
		}
		if _, ok := rule["listener"]; ok {
			switch {
			case ingress:
				return at(field("listener"), errors.New("Cilium takes a listener only in egress rules"))
			case hasL7:
				return at(field("listener"), errors.New("Cilium does not take a listener with L7 rules"))
			}
		}
		if !hasL7 {
			return nil
		}
		ports, _ := rule["ports"].([]any)
		if dns && len(ports) == 0 {
			return at(field("ports"), errors.New("DNS rules need their port (53) listed: Cilium refuses them without ports"))
		}
		for i, p := range ports {
			p := p.(map[string]any)
			if err := l7Port(p, dns); err != nil {
				return at(field("ports"), at(index(i), err))
			}
		}
		return nil
	}
}

// l7Port checks a port of a rule with L7 rules.
func l7Port(p map[string]any, dns bool) error {
	number, numeric := portNumber(p["port"].(string))
	switch protocol, _ := p["protocol"].(string); {
	case numeric && number == 0:
		return at(field("port"), errors.New("L7 rules cannot be used with port 0 (all ports): Cilium refuses them"))
	case !dns && protocol != "TCP":
		if protocol == "" {
			protocol = "none, so any"
		}
		return at(field("protocol"), fmt.Errorf("L7 rules other than DNS apply only to TCP; Cilium refuses them with protocol %s: give protocol TCP", protocol))
	case dns && numeric:
		if end, _ := integer(p["endPort"]); end > int64(number) {
			return at(field("endPort"), errors.New("DNS rules do not support port ranges: Cilium refuses them"))
		}
	}
	return nil
}

// portProtocol is Cilium's PortProtocol.
var portProtocol = object("port", fields{
	"port":     str(port),
	"endPort":  intRange(0, 65535),
	"protocol": enum("TCP", "UDP", "SCTP", "VRRP", "IGMP", "ANY"),
}, portGiven, portless, rangeUpward)

// portGiven is Cilium's "port must be specified" (without extended IP
// protocols, off by default).
func portGiven(p map[string]any) error {
	if _, ok := p["port"]; !ok {
		return at(field("port"), errors.New(`must be given: Cilium requires a port (use "0" for all ports)`))
	}
	return nil
}

// portless is Cilium's check that VRRP and IGMP, which have no ports, are
// given port 0.
func portless(p map[string]any) error {
	protocol, _ := p["protocol"].(string)
	if protocol != "VRRP" && protocol != "IGMP" {
		return nil
	}
	if n, numeric := portNumber(p["port"].(string)); numeric && n != 0 {
		return at(field("port"), fmt.Errorf("%s has no ports: Cilium takes only port \"0\" with it", protocol))
	}
	return nil
}

// rangeUpward refuses an endPort below its port; stricter than Cilium,
// which takes it: a range that runs downwards is a mistake, whatever Cilium
// makes of it.
func rangeUpward(p map[string]any) error {
	end, _ := integer(p["endPort"])
	if n, numeric := portNumber(p["port"].(string)); numeric && end != 0 && end < int64(n) {
		return at(field("endPort"), fmt.Errorf("%d is below port %d: a range runs from port up to endPort (leave endPort out for one port)", end, n))
	}
	return nil
}

// serviceName is an IANA service name (RFC 6335 5.1), as Cilium's
// iana.IsSvcName takes it: a name of a container's port.
var serviceName = regexp.MustCompile(`^([a-zA-Z0-9]-?)*[a-zA-Z](-?[a-zA-Z0-9])*$`)

// port is a port number 0..65535 ("0": all ports) or the name of a
// container's port. Cilium parses a number with strconv's base prefixes
// ("010" is 8); this takes decimal only.
func port(s string) error {
	if s == "" {
		return errors.New(`must not be empty: Cilium requires a port (use "0" for all ports)`)
	}
	if len(s) <= 15 && serviceName.MatchString(s) {
		return nil
	}
	if _, numeric := portNumber(s); numeric {
		return nil
	}
	if strings.Trim(s, "0123456789") == "" {
		if s[0] == '0' {
			return fmt.Errorf("%s is not a port: write it in decimal without leading zeros (Cilium would read it as octal)", quote(s))
		}
		return fmt.Errorf("%s is not a port: a port number is 0..65535", quote(s))
	}
	return fmt.Errorf("%s is not a port: a port is a number 0..65535 or a port name "+
		"(at most 15 letters, digits and '-', at least one letter, no '-' at either end or next to another)", quote(s))
}

// portNumber is s as a decimal port number without leading zeros, if it is
// one.
func portNumber(s string) (uint16, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err == nil
}

// l7Rules is Cilium's L7Rules: HTTP or DNS rules, not both.
var l7Rules = object("L7 rule set", fields{
	"dns":  list("DNS rule", 0, fqdnSelector),
	"http": list("HTTP rule", 0, httpRule),
}, exactlyOne("an L7 rule set", "http", "dns"))

// httpRule is Cilium's PortRuleHTTP; path and method are regular
// expressions, which Cilium compiles with Go's regexp: httpRegexps checks
// them, after the schema.
var httpRule = object("HTTP rule", fields{
	"headerMatches": list("header match", 0, object("header match", fields{
		"mismatch": enum("LOG", "ADD", "DELETE", "REPLACE"),
		"name":     str(notEmpty),
		"secret": object("secret reference", fields{
			"name":      str(notEmpty),
			"namespace": anyString,
		}, required("a secret reference", "name")),
		"value": anyString,
	}, required("a header match", "name"))),
	"headers": list("header", 0, anyString),
	"host":    anyString,
	"method":  anyString,
	"path":    anyString,
})

// listener is Cilium's Listener: traffic redirected to an Envoy listener
// of a CiliumEnvoyConfig.
var listener = object("listener", fields{
	"envoyConfig": object("Envoy config reference", fields{
		"kind": enum("CiliumEnvoyConfig", "CiliumClusterwideEnvoyConfig"),
		"name": str(notEmpty),
	}, required("an Envoy config reference", "name")),
	"name":     str(notEmpty),
	"priority": intRange(1, 100),
}, required("a listener", "envoyConfig", "name"))

// tlsContext is Cilium's TLSContext.
var tlsContext = object("TLS context", fields{
	"secret": object("secret reference", fields{
		"name":      anyString,
		"namespace": anyString,
	}, required("a secret reference", "name")),
	"trustedCA":   anyString,
	"certificate": anyString,
	"privateKey":  anyString,
}, required("a TLS context", "secret"))

// icmpRule is Cilium's ICMPRule.
var icmpRule = object("ICMP rule", fields{
	"fields": list("ICMP field", maxPorts, object("ICMP field", fields{
		"family": enum("IPv4", "IPv6"),
		"type":   numberOrString,
	}, required("an ICMP field", "type"), icmpType)),
})

func numberOrString(v any) error {
	switch v.(type) {
	case string, float64, int, int64, int32:
		return nil
	}
	return mustBe("an ICMP type (a number or a name)", v)
}

// icmpType checks a field's type: 0..255, as a number or a string, or the
// name of a type of the field's family (IPv4 unless given), as Cilium's
// ICMPField reads it.
func icmpType(f map[string]any) error {
	family, _ := f["family"].(string)
	if family == "" {
		family = "IPv4"
	}
	switch t := f["type"].(type) {
	case string:
		if n, err := strconv.Atoi(t); err == nil && strconv.Itoa(n) == t {
			if n < 0 || n > 255 {
				return at(field("type"), fmt.Errorf("%d is not an ICMP type: 0..255", n))
			}
			return nil
		}
		if t == "ExtendedEchoReply" {
			return at(field("type"), fmt.Errorf("%q is a name Cilium's CRD refuses (its pattern has a space in it); write the number: %d", t, extendedEchoReply[family]))
		}
		if !slices.Contains(icmpTypeNames[family], t) {
			return at(field("type"), fmt.Errorf("%s is not an ICMP type of %s (a number 0..255, or one of %s)", quote(t), family, strings.Join(icmpTypeNames[family], ", ")))
		}
	default:
		if err := intRange(0, 255)(t); err != nil {
			return at(field("type"), err)
		}
	}
	return nil
}

// ICMPTypeNames are the names Check takes for an ICMP type of family (IPv4
// or IPv6), besides the numbers 0..255.
func ICMPTypeNames(family string) []string { return slices.Clone(icmpTypeNames[family]) }

// icmpTypeNames are the names Cilium knows for ICMP types, by family, but
// ExtendedEchoReply: Cilium's agent knows it, but its CRD writes the
// pattern of a type as a YAML scalar folded over two lines, which put a
// space into the name ("ExtendedEcho Reply"), so the API server refuses
// every policy that names it. Its number passes (extendedEchoReply).
var icmpTypeNames = map[string][]string{
	"IPv4": {"EchoReply", "DestinationUnreachable", "Redirect", "Echo", "EchoRequest", "RouterAdvertisement",
		"RouterSelection", "TimeExceeded", "ParameterProblem", "Timestamp", "TimestampReply", "Photuris",
		"ExtendedEchoRequest"},
	"IPv6": {"DestinationUnreachable", "PacketTooBig", "TimeExceeded", "ParameterProblem", "EchoRequest", "EchoReply",
		"MulticastListenerQuery", "MulticastListenerReport", "MulticastListenerDone", "RouterSolicitation",
		"RouterAdvertisement", "NeighborSolicitation", "NeighborAdvertisement", "RedirectMessage", "RouterRenumbering",
		"ICMPNodeInformationQuery", "ICMPNodeInformationResponse", "InverseNeighborDiscoverySolicitation",
		"InverseNeighborDiscoveryAdvertisement", "HomeAgentAddressDiscoveryRequest", "HomeAgentAddressDiscoveryReply",
		"MobilePrefixSolicitation", "MobilePrefixAdvertisement", "DuplicateAddressRequestCodeSuffix",
		"DuplicateAddressConfirmationCodeSuffix", "ExtendedEchoRequest"},
}

// extendedEchoReply is the number of the ICMP type ExtendedEchoReply, by
// family (RFC 8335).
var extendedEchoReply = map[string]int{"IPv4": 43, "IPv6": 161}
