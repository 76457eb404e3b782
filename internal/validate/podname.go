package validate

import (
	"fmt"
	"regexp"
)

// MaxPodNameLength is the longest DNS subdomain (RFC 1123), and so the
// longest Pod name Kubernetes accepts.
const MaxPodNameLength = 253

// podNamePattern is a DNS subdomain as Kubernetes checks one
// (k8s.io/apimachinery's IsDNS1123Subdomain): dot-separated lowercase
// labels of letters, digits and '-', each starting and ending with a
// letter or digit. ctrld does not link apimachinery, so the rule is here.
var podNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// PodName checks a Pod's name as an agent reports it: a DNS subdomain of at
// most MaxPodNameLength characters, which every Pod the API server holds
// has. Anything else (control sequences, say) is no Pod's name.
func PodName(name string) error {
	switch {
	case name == "":
		return ErrEmpty
	case len(name) > MaxPodNameLength:
		return fmt.Errorf("%s is %d characters long, at most %d allowed", Quote(name), len(name), MaxPodNameLength)
	case !podNamePattern.MatchString(name):
		return fmt.Errorf("%s is not a DNS subdomain (lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit), as every Pod name is", Quote(name))
	}
	return nil
}
