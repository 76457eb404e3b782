package ciliumspec

import (
	"errors"
	"fmt"
	"strings"
)

// Label selectors, as Cilium reads them: its EndpointSelector is a
// Kubernetes LabelSelector whose keys Cilium first extends with their
// source ("k8s:app" is k8s.app, "$host" is reserved.host, a key without a
// source is any.<key>), and then checks as Kubernetes checks a selector
// (ValidateLabelSelector, invalid values not allowed). So a key Kubernetes
// would take may still be too long for Cilium: "any." counts.

// endpointSelector selects endpoints by their labels.
var endpointSelector = labelSelector("endpoint selector", extendedKey)

// cidrGroupSelector selects CiliumCIDRGroups; Cilium prefixes its keys with
// "cidrgroup." (labels.LabelSourceCIDRGroupKeyPrefix).
var cidrGroupSelector = labelSelector("CIDR group selector", func(k string) string { return "cidrgroup." + k })

func labelSelector(what string, extend func(key string) string) check {
	return object(what, fields{
		"matchLabels": matchLabels(extend),
		"matchExpressions": list("requirement", 0, object("requirement", fields{
			"key":      anyString,
			"operator": enum("In", "NotIn", "Exists", "DoesNotExist"),
			"values":   list("value", 0, str(labelValue)),
		}, required("a requirement", "key", "operator"), requirement(extend))),
	})
}

// matchLabels checks a selector's label map: keys as Cilium extends them,
// values as Kubernetes label values (the CRD's pattern, 63 at most).
func matchLabels(extend func(string) string) check {
	return stringMap(func(k string) error { return labelKey(k, extend) }, str(labelValue))
}

// requirement checks a matchExpressions entry beyond its fields' types:
// its key, and that In and NotIn have values and Exists and DoesNotExist
// none.
func requirement(extend func(string) string) func(m map[string]any) error {
	return func(m map[string]any) error {
		if err := labelKey(m["key"].(string), extend); err != nil {
			return at(field("key"), err)
		}
		n := count(m, "values")
		switch op := m["operator"].(string); op {
		case "In", "NotIn":
			if n == 0 {
				return at(field("values"), fmt.Errorf("must hold at least one value for operator %s", op))
			}
		default:
			if n > 0 {
				return at(field("values"), fmt.Errorf("must be empty for operator %s", op))
			}
		}
		return nil
	}
}

// extendedKey is key as Cilium's EndpointSelector stores it
// (labels.GetExtendedKeyFrom): its source and the rest joined by ".",
// anything from a "=" on dropped.
func extendedKey(key string) string {
	source, rest := "any", key
	switch {
	case strings.HasPrefix(key, "$"):
		source, rest = "reserved", key[1:]
	case strings.IndexByte(key, ':') >= 0:
		i := strings.IndexByte(key, ':')
		source, rest = key[:i], key[i+1:]
	case strings.HasPrefix(key, "reserved."):
		source, rest = "reserved", strings.TrimPrefix(key, "reserved.")
	}
	if i := strings.IndexByte(rest, '='); i >= 0 {
		rest = rest[:i]
	}
	return source + "." + rest
}

// labelKey checks a selector's key as Cilium does: extended, it must be a
// Kubernetes qualified name.
func labelKey(k string, extend func(string) string) error {
	ext := extend(k)
	if err := qualifiedName(ext); err != nil {
		if ext == k {
			return fmt.Errorf("%s is not a valid label key: %v", quote(k), err)
		}
		return fmt.Errorf("%s is not a valid label key: Cilium reads it as %s, which %v", quote(k), quote(ext), err)
	}
	return nil
}

// The Kubernetes rules for label keys and values (k8s.io/apimachinery's
// util/validation IsQualifiedName and IsValidLabelValue; the tests hold
// these to that package). Written out here so that ctrld and unkey-tui,
// which link this package, do not link apimachinery and klog for two
// patterns.
const (
	maxNameLength      = 63
	maxSubdomainLength = 253
)

// qualifiedName checks an optional DNS subdomain prefix and a "/", then a
// name of at most 63 characters: alphanumerics with '-', '_' or '.' inside.
func qualifiedName(s string) error {
	prefix, name, hasPrefix := strings.Cut(s, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if strings.Contains(name, "/") {
		return errors.New("has more than one '/'")
	}
	if hasPrefix {
		if prefix == "" {
			return errors.New("has an empty prefix before '/'")
		}
		if err := Subdomain(prefix); err != nil {
			return fmt.Errorf("has a prefix that %v", err)
		}
	}
	switch {
	case name == "":
		return errors.New("has an empty name")
	case len(name) > maxNameLength:
		return fmt.Errorf("has a name of %d characters, at most %d allowed", len(name), maxNameLength)
	case !labelName(name):
		return errors.New("has a name that is not alphanumerics with '-', '_' or '.' inside")
	}
	return nil
}

// labelValue checks a label value: empty, or a name of at most 63
// characters.
func labelValue(s string) error {
	switch {
	case len(s) > maxNameLength:
		return fmt.Errorf("%s is not a valid label value: %d characters, at most %d allowed", quote(s), len(s), maxNameLength)
	case s != "" && !labelName(s):
		return fmt.Errorf("%s is not a valid label value: alphanumerics with '-', '_' or '.' inside, or empty", quote(s))
	}
	return nil
}

// labelName is ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
func labelName(s string) bool {
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// Subdomain checks an RFC 1123 DNS subdomain, as Kubernetes checks one
// (apimachinery's IsDNS1123Subdomain; this package's callers do not link
// it): at most 253 characters, dot-separated labels of lowercase
// alphanumerics with '-' inside. The error does not repeat s.
func Subdomain(s string) error {
	if len(s) > maxSubdomainLength {
		return fmt.Errorf("is %d characters long, at most %d allowed", len(s), maxSubdomainLength)
	}
	for part := range strings.SplitSeq(s, ".") {
		if !dnsLabel(part) {
			return errors.New("is not a DNS subdomain (lowercase alphanumerics and '-', dot-separated)")
		}
	}
	return nil
}

// dnsLabel is [a-z0-9]([-a-z0-9]*[a-z0-9])?, length unbounded (a
// subdomain's labels are bounded only by the subdomain's length).
func dnsLabel(s string) bool {
	if s == "" || !lowerAlnum(s[0]) || !lowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !lowerAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return lowerAlnum(c) || 'A' <= c && c <= 'Z'
}

func lowerAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
