package operator

import (
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// A baking region's time left is that of the bake the driver applies:
// a wave's bake under rollout.MinBake bakes MinBake, so a bake of 0 still
// has time left, and the next step says how long it bakes.
func TestBakeLeftIsTheBakeTheDriverApplies(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-2 * time.Second)
	st := jsontype.RegionRollout{State: desired.RegionBaking, HealthySince: &since}
	for bake, want := range map[int]time.Duration{0: rollout.MinBake - 2*time.Second, 60: 58 * time.Second} {
		if left, ok := bakeLeft(st, jsontype.Wave{BakeSeconds: bake}, now); !ok || left != want {
			t.Errorf("bake %ds, healthy 2s: %s left (%v), want %s", bake, left, ok, want)
		}
	}
}
