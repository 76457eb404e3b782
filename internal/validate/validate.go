package validate

import (
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"
)

// Limits on desired-state values.
const (
	// MaxIDLength keeps "<id>-<ordinal>" Pod names and the StatefulSet's
	// controller-revision-hash label within Kubernetes' 63-character limit.
	MaxIDLength     = 48
	MaxRegionLength = 63
	MaxReplicas     = 1000
	MaxImageLength  = 512
)

// dnsLabel is RFC 1123: what Kubernetes accepts as a Service or namespace
// name, and so what IDs and regions must be.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// imageRef follows the distribution reference grammar: optional registry
// host[:port], slash-separated lowercase path components, optional tag,
// optional digest.
var imageRef = regexp.MustCompile(`^` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*` +
	`(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?` +
	`$`)

// envName is what Kubernetes accepts as an environment variable name.
var envName = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)

// EnvName checks an environment variable name.
func EnvName(name string) error {
	if !envName.MatchString(name) || len(name) > 256 {
		return fmt.Errorf("%q is not a valid environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)", name)
	}
	return nil
}

// ErrEmpty is returned for a required value that is empty.
var ErrEmpty = errors.New("must not be empty")

// ID checks a resource ID (deployment, sentinel, policy, workspace,
// environment): a DNS label of at most MaxIDLength characters.
func ID(id string) error {
	return label(id, MaxIDLength)
}

// Region checks a region name: a DNS label.
func Region(region string) error {
	return label(region, MaxRegionLength)
}

func label(s string, max int) error {
	switch {
	case s == "":
		return ErrEmpty
	case len(s) > max:
		return fmt.Errorf("%q is %d characters long, at most %d allowed", s, len(s), max)
	case !dnsLabel.MatchString(s):
		return fmt.Errorf("%q must be lowercase letters, digits and '-', starting and ending with a letter or digit", s)
	}
	return nil
}

// Image checks a container image reference such as
// "ghcr.io/acme/api:v1.2" or "nginx@sha256:...".
func Image(image string) error {
	switch {
	case image == "":
		return ErrEmpty
	case len(image) > MaxImageLength:
		return fmt.Errorf("image reference is %d characters long, at most %d allowed", len(image), MaxImageLength)
	case !imageRef.MatchString(image):
		return fmt.Errorf("%q is not a valid image reference (want [registry/]name[:tag][@digest])", image)
	}
	return nil
}

// Replicas checks a replica count: 0..MaxReplicas.
func Replicas(n int) error {
	if n < 0 || n > MaxReplicas {
		return fmt.Errorf("%d is out of range 0..%d", n, MaxReplicas)
	}
	return nil
}

// Positive checks a resource size such as CPU millicores or memory MiB.
func Positive(n int) error {
	if n <= 0 {
		return fmt.Errorf("%d must be greater than 0", n)
	}
	return nil
}

// Clip shortens s to at most n bytes without splitting a UTF-8 character,
// for text stored in a column of fixed size: a split character is an
// invalid byte sequence that a utf8mb4 column refuses.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
