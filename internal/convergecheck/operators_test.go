package convergecheck

import (
	"math/rand/v2"
	"testing"

	"github.com/deploysync/deploysync/internal/validate"
)

// The operators' policies are ones ctrld takes: a spec it refused would turn
// every put-policy into a failed call, and no policy would ever converge.
func TestPolicySpecsAreValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		if spec := validate.StructMap(policySpec(rng)); validate.CiliumPolicySpec(spec) != nil {
			t.Fatalf("%v: %v", spec, validate.CiliumPolicySpec(spec))
		}
	}
}
