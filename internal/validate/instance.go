package validate

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/deploysync/deploysync/internal/limits"
)

// MaxSpecHashLength is the longest spec hash: the longest label value,
// since agents put it on Pods as one (DeploymentState.spec_hash).
const MaxSpecHashLength = 63

// labelValue is what Kubernetes accepts as a (non-empty) label value.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// SpecHash checks a spec hash: empty (none), or a valid label value of at
// most MaxSpecHashLength characters, which agents can put on a Pod.
func SpecHash(hash string) error {
	switch {
	case hash == "":
		return nil
	case len(hash) > MaxSpecHashLength:
		return fmt.Errorf("%s is %d bytes; at most %d, as it must be a label value", Quote(hash), len(hash), MaxSpecHashLength)
	case !labelValue.MatchString(hash):
		return fmt.Errorf("%s is not a label value (letters, digits, '-', '_' and '.', beginning and ending with a letter or digit)", Quote(hash))
	}
	return nil
}

// InstanceReason checks why an agent says an instance is not ready: empty,
// or Kubernetes' words for it (CrashLoopBackOff, ...), at most
// limits.MaxInstanceReasonBytes of valid UTF-8 without control or format
// characters, as every console shows it.
func InstanceReason(reason string) error {
	switch {
	case len(reason) > limits.MaxInstanceReasonBytes:
		return fmt.Errorf("%s is %d bytes; at most %d", Quote(reason), len(reason), limits.MaxInstanceReasonBytes)
	case !utf8.ValidString(reason):
		return fmt.Errorf("%s is not valid UTF-8", Quote(reason))
	}
	if i := strings.IndexFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("%s has a control or format character at byte %d", Quote(reason), i)
	}
	return nil
}
