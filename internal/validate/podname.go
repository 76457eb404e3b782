package validate

import (
	"fmt"

	"github.com/deploysync/deploysync/internal/validate/ciliumspec"
)

// PodName checks a Pod's name as an agent reports it: a DNS subdomain
// (ciliumspec.Subdomain, the rule Kubernetes holds every Pod's name to).
// Anything else (control sequences, say) is no Pod's name.
func PodName(name string) error {
	if name == "" {
		return ErrEmpty
	}
	if err := ciliumspec.Subdomain(name); err != nil {
		return fmt.Errorf("%s %w, as every Pod name is", Quote(name), err)
	}
	return nil
}
