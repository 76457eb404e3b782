package rollout_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// BenchmarkDriverRound is what the rollout driver costs the database: one
// look at n rollouts in flight (each a deployment in three regions, its
// canary wave progressing, no agent reporting yet), as every replica makes
// each second, and its time per rollout; rollouts=0 is a round with none
// in flight, what every replica pays when nothing rolls out.
func BenchmarkDriverRound(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("rollouts=%d", n), func(b *testing.B) {
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
			for i := range n {
				id := fmt.Sprintf("app-%04d", i)
				err := s.Deploy(ctx, desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod", Image: "app:1",
					CPUMillicores: 100, MemoryMiB: 64}, regions, 1)
				if err != nil {
					b.Fatal(err)
				}
				v2 := "app:2"
				if _, err := s.UpdateDeployment(desired.WithStrategy(ctx, waves), id, desired.SpecUpdate{Image: &v2}); err != nil {
					b.Fatal(err)
				}
			}
			d := &rollout.Driver{Store: s, Client: db.Ent, DB: db.SQL, Log: slog.New(slog.DiscardHandler)}
			// The first round writes each canary's first look ("its agent
			// is not connected"); later rounds find nothing new.
			if _, err := d.Round(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, err := d.Round(ctx); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			if n > 0 {
				b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N)/float64(n), "µs/rollout")
			}
		})
	}
}
