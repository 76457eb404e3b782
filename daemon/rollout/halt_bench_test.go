package rollout_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// BenchmarkHaltOf1000Rollouts is the time from a fleet halt's call until
// no rollout's next step can run, with 1,000 rollouts in flight: the
// halt's commit pauses every one of them (and writes each one's version,
// so a step read before it fails), so that time is the halt's own. Beside
// it, the same run pauses the 1,000 one by one with `rollout pause`, what
// an operator had before (the ratio is halt/one-by-one), and checks that
// a driver round after the halt takes no step. ms/lift is the halt's
// resume of the 1,000, in one transaction that holds the fleet's lock.
func BenchmarkHaltOf1000Rollouts(b *testing.B) {
	const n = 1000
	db := storetest.New(b)
	s := desired.New(db.Ent)
	ctx := context.Background()
	regions := []string{"ap-south", "eu-west", "us-east"}
	for _, r := range regions {
		if err := s.EnsureRegion(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	waves := jsontype.Strategy{Waves: []jsontype.Wave{{Regions: []string{"eu-west"}, BakeSeconds: 60}, {Regions: []string{"*"}}}}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("app-%04d", i)
		err := s.Deploy(ctx, desired.DeploymentSpec{ID: ids[i], WorkspaceID: "ws", EnvironmentID: "prod", Image: "app:1",
			CPUMillicores: 100, MemoryMiB: 64}, regions, 1)
		if err != nil {
			b.Fatal(err)
		}
		v2 := "app:2"
		if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, waves), ids[i], desired.SpecUpdate{Image: &v2}); err != nil {
			b.Fatal(err)
		}
	}
	d := &rollout.Driver{Store: s, Client: db.Ent, DB: db.SQL, Log: slog.New(slog.DiscardHandler)}
	if _, err := d.Round(ctx); err != nil {
		b.Fatal(err)
	}
	var halting, lifting, oneByOne time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		h, paused, err := s.Halt(ctx, fleet.Scope{}, "bench")
		halting += time.Since(start)
		if err != nil || paused != n {
			b.Fatalf("halt: paused %d, %v", paused, err)
		}
		if steps, err := d.Round(ctx); err != nil || steps != 0 {
			b.Fatalf("a round after the halt: %d steps, %v; want none", steps, err)
		}
		start = time.Now()
		resumed, _, err := s.Resume(ctx, h.ID)
		lifting += time.Since(start)
		if err != nil || resumed != n {
			b.Fatalf("resume: %d, %v", resumed, err)
		}
		start = time.Now()
		for _, id := range ids {
			if _, err := s.ControlRollout(ctx, id, desired.RolloutPause); err != nil {
				b.Fatal(err)
			}
		}
		oneByOne += time.Since(start)
		for _, id := range ids {
			if _, err := s.ControlRollout(ctx, id, desired.RolloutResume); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(halting.Milliseconds())/float64(b.N), "ms/halt")
	b.ReportMetric(float64(lifting.Milliseconds())/float64(b.N), "ms/lift")
	b.ReportMetric(float64(oneByOne.Milliseconds())/float64(b.N), "ms/1000-pauses")
	b.ReportMetric(float64(halting)/float64(oneByOne), "halt/one-by-one")
}
