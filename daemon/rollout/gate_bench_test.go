package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deploysync/deploysync/daemon/rollout"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// BenchmarkGateToNextWave is the time from the end of a canary region's
// bake (bake 0, so rollout.MinBake: its healthy_since plus that) to the
// next wave's change reaching that wave's agent on its stream, through a
// real ctrld on MariaDB; p50 and p99 over b.N rollouts, at the driver's
// default interval (1 s) and at 100 ms. A bake ends on the first heartbeat
// after its end (every 2 s here, as agentd sends them), which pokes the
// driver: about half a heartbeat interval on average, whatever the
// driver's interval. Before bakes counted only watched time, the report
// itself ended a bake of 0 and this measured from it (45 ms p50).
func BenchmarkGateToNextWave(b *testing.B) {
	for _, interval := range []time.Duration{time.Second, 100 * time.Millisecond} {
		b.Run(fmt.Sprintf("interval=%s", interval), func(b *testing.B) {
			env := servertest.Start(b, server.Config{RolloutInterval: interval})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			agents := map[string]ctrlv1.ClusterServiceClient{}
			events := map[string]chan *ctrlv1.DeploymentChangeEvent{}
			for _, region := range []string{"eu", "us"} {
				agents[region] = env.Agent(region)
				events[region] = follow(b, ctx, agents[region], region)
			}
			op := env.Operator("bench")
			if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
				Image: "app:0", CpuMillicores: 10, MemoryMib: 16, Regions: []string{"eu", "us"}, Replicas: 1}); err != nil {
				b.Fatal(err)
			}
			for _, region := range []string{"eu", "us"} {
				waitImage(b, events[region], "app:0")
			}
			canary := &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
				{Regions: []string{"eu"}, Bake: durationpb.New(0)}, {Regions: []string{"us"}}}}
			var took []time.Duration
			b.ResetTimer()
			for i := range b.N {
				image := fmt.Sprintf("app:%d", i+1)
				if _, err := op.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: "api", Image: &image, Rollout: canary}); err != nil {
					b.Fatal(err)
				}
				state, version := waitImage(b, events["eu"], image)
				// The canary's agent applied it and its one instance is
				// ready on the new spec: the region bakes, and passes at
				// the first heartbeat after MinBake.
				reportHealthy(b, ctx, agents["eu"], "eu", state.GetSpecHash(), version)
				bakeEnds := healthySince(b, op, "eu").Add(rollout.MinBake)
				state, version = waitImage(b, events["us"], image)
				took = append(took, time.Since(bakeEnds))
				reportHealthy(b, ctx, agents["us"], "us", state.GetSpecHash(), version)
				waitEnded(b, op)
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// reportHealthy reports, as region's agent, the change at version of api
// applied and its one instance ready on the spec named hash.
func reportHealthy(b *testing.B, ctx context.Context, agent ctrlv1.ClusterServiceClient, region, hash string, version uint64) {
	b.Helper()
	if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: region, Resources: []*ctrlv1.ResourceSync{
		{Kind: "deployment", ResourceId: "api", AppliedVersion: version, ReceivedVersion: version, InSync: true}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := agent.ReportDeploymentStatus(ctx, &ctrlv1.ReportDeploymentStatusRequest{Region: region, Deployments: []*ctrlv1.DeploymentStatus{
		{DeploymentId: "api", Instances: []*ctrlv1.Instance{{PodName: "api-0", Status: ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING,
			Ready: true, SpecHash: hash}}}}}); err != nil {
		b.Fatal(err)
	}
}

// follow opens region's stream and sends its deployment events on; it
// heartbeats, so that the region's agent counts as connected.
func follow(b *testing.B, ctx context.Context, agent ctrlv1.ClusterServiceClient, region string) chan *ctrlv1.DeploymentChangeEvent {
	b.Helper()
	identity := "agent-" + region
	s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: identity})
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan *ctrlv1.DeploymentChangeEvent, 64)
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				return
			}
			if ev.GetDeployment() != nil {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	go func() {
		for ctx.Err() == nil {
			agent.ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{Region: region, AgentIdentity: identity})
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second): // as agentd sends them
			}
		}
	}()
	return out
}

// waitImage waits for an apply of image on events and returns its state
// and version.
func waitImage(b *testing.B, events chan *ctrlv1.DeploymentChangeEvent, image string) (*ctrlv1.DeploymentState, uint64) {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if d := ev.GetDeployment().GetDeployment(); d.GetImage() == image {
				return d, ev.GetVersion()
			}
		case <-timeout:
			b.Fatalf("no event with image %s within 30s", image)
		}
	}
}

// healthySince waits until region of api's rollout in flight turned
// healthy, and returns when.
func healthySince(b *testing.B, op ctrlv1.OperatorServiceClient, region string) time.Time {
	b.Helper()
	var since time.Time
	eventually.True(b, 30*time.Second, region+" never turned healthy", func() bool {
		r, err := op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
		for _, in := range r.GetRollout().GetRegions() {
			if err == nil && in.Region == region && in.HealthySince != nil {
				since = in.HealthySince.AsTime()
				return true
			}
		}
		return false
	})
	return since
}

// waitEnded waits until api has no rollout in flight.
func waitEnded(b *testing.B, op ctrlv1.OperatorServiceClient) {
	b.Helper()
	eventually.True(b, 30*time.Second, "the rollout never ended", func() bool {
		r, err := op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: "api"})
		return err == nil && r.GetRollout().GetFinishedAt() != nil
	})
}
