package feedcheck

import (
	"math/rand/v2"
	"testing"

	"github.com/deploysync/deploysync/internal/validate"
)

// The workload's policies are ones ctrld takes: a spec it refused would make
// every desired.ensure-policy fail, and the policies in the feed would come
// only from the raw transactions.
func TestPolicySpecsAreValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		if spec := policySpec(r); validate.CiliumPolicySpec(spec) != nil {
			t.Fatalf("%v: %v", spec, validate.CiliumPolicySpec(spec))
		}
	}
}
