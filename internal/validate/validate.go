package validate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
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
		return fmt.Errorf("%s is not a valid environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)", Quote(name))
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
		return fmt.Errorf("%s is %d characters long, at most %d allowed", Quote(s), len(s), max)
	case !dnsLabel.MatchString(s):
		return fmt.Errorf("%s must be lowercase letters, digits and '-', starting and ending with a letter or digit", Quote(s))
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
		return fmt.Errorf("%s is not a valid image reference (want [registry/]name[:tag][@digest])", Quote(image))
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

// Container resources. Kubernetes takes quantities of any size, but no node
// has them: a request beyond every node's capacity leaves the Pod pending
// forever. The bounds are generous (no machine has 1,000 cores or 16 TiB
// for one container today) but finite, and keep every value well inside the
// stream's int32 fields.
const (
	MaxCPUMillicores = 1_000_000 // 1,000 cores
	MaxMemoryMiB     = 16 << 20  // 16 TiB
)

// CPUMillicores checks a container's CPU in millicores: 1..MaxCPUMillicores.
func CPUMillicores(n int) error { return inRange(n, 1, MaxCPUMillicores) }

// MemoryMiB checks a container's memory in MiB: 1..MaxMemoryMiB.
func MemoryMiB(n int) error { return inRange(n, 1, MaxMemoryMiB) }

func inRange(n, min, max int) error {
	if n < min || n > max {
		return fmt.Errorf("%d is out of range %d..%d", n, min, max)
	}
	return nil
}

// MaxArgBytes is the longest command argument or NAME=value environment
// string a process can receive: Linux's MAX_ARG_STRLEN (32 pages of 4 KiB)
// less the terminating NUL. execve refuses a longer one, so a container
// holding it could never start.
const MaxArgBytes = 32*4096 - 1

// Arg checks one command argument.
func Arg(arg string) error {
	if len(arg) > MaxArgBytes {
		return fmt.Errorf("argument is %d bytes long, at most %d allowed", len(arg), MaxArgBytes)
	}
	return processString(arg)
}

// EnvValue checks the value of the environment variable name. Every byte
// but NUL is allowed: values such as PEM blocks carry newlines, and
// Kubernetes and execve pass other control characters through unchanged.
func EnvValue(name, value string) error {
	if n := len(name) + 1 + len(value); n > MaxArgBytes {
		return fmt.Errorf("%.64s=<value> is %d bytes long, at most %d allowed", name, n, MaxArgBytes)
	}
	if err := processString(value); err != nil {
		return fmt.Errorf("value of %.64s %w", name, err)
	}
	return nil
}

// processString checks what a string must be to reach a process through
// Kubernetes: a process gets C strings, which end at the first NUL, and the
// Kubernetes API speaks JSON, which holds only valid UTF-8 (Go's encoder
// would replace the invalid bytes, so the container would get another
// string than the one accepted).
func processString(s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("contains a NUL byte (at byte %d), which no process can receive", i)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
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

// Text makes s valid UTF-8 (each invalid byte becomes U+FFFD) and clips it
// to n bytes: an error's text may hold any bytes, and a protobuf string
// that is not UTF-8 fails the whole message it is in, every time it is
// sent.
func Text(s string, n int) string {
	return Clip(strings.ToValidUTF8(s, "\uFFFD"), n)
}

// quoteLimit bounds how much of a refused value an error message repeats.
const quoteLimit = 64

// Quote quotes a value for an error message, shortened to its first
// quoteLimit bytes: a 1 MiB ID must not come back as a 1 MiB error (to the
// caller, into the log and into the audit record).
func Quote(s string) string {
	if len(s) <= quoteLimit {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", Clip(s, quoteLimit), len(s))
}
