package operator_test

import (
	"context"
	"math"
	"testing"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Whatever one agent record holds — a cursor no database ever issued, the
// last representable time — the console's views still answer for every
// region, and show that record as it is. The values are written straight
// into the database: ctrld refuses them at intake now, but rows written
// before that, or by hand, must not take the console down.
func TestViewsAnswerWhateverAnAgentRecordHolds(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	env.AgentToken("eu")
	env.AgentToken("us")
	op := env.Operator("alice")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu", "us"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{"eu", "us"} {
		if _, err := env.Agent(region).ReportAgentStatus(ctx, &ctrlv1.ReportAgentStatusRequest{
			Region: region, AgentIdentity: "krane-" + region}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.DB.SQL.ExecContext(ctx,
		"UPDATE agents SET acked_cursor = ?, last_full_sync = '9999-12-31 23:59:59.999999', "+
			"connected_since = '9999-12-31 23:59:59.999999' WHERE region = 'eu'", uint64(math.MaxUint64)); err != nil {
		t.Fatal(err)
	}

	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		t.Fatalf("ListRegions: %v", err)
	}
	byRegion := map[string]*ctrlv1.RegionOverview{}
	for _, r := range regions.Regions {
		byRegion[r.Region] = r
	}
	if eu := byRegion["eu"]; eu == nil || eu.AckedVersion != math.MaxUint64 || eu.LagChanges != 0 || eu.AgentIdentity != "krane-eu" {
		t.Errorf("eu overview: %+v, want the stored cursor and no lag", eu)
	}
	if us := byRegion["us"]; us == nil || us.LagChanges != 1 || us.AgentIdentity != "krane-us" {
		t.Errorf("us overview: %+v, want lag 1 from its own agent", us)
	}

	eu, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: "eu"})
	if err != nil {
		t.Fatalf("GetRegion: %v", err)
	}
	if eu.Overview.AckedVersion != math.MaxUint64 || len(eu.Deployments) != 1 {
		t.Errorf("GetRegion(eu): %+v", eu)
	}
	if eu.Overview.GetLastFullSync().AsTime().Year() != 9999 {
		t.Errorf("GetRegion(eu) last full sync %v, want the stored year 9999", eu.Overview.GetLastFullSync().AsTime())
	}

	pending, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: "eu"})
	if err != nil {
		t.Fatalf("ListPendingChanges(eu): %v", err)
	}
	if pending.Total != 0 || len(pending.Changes) != 0 {
		t.Errorf("ListPendingChanges(eu): %+v, want nothing pending past the stored cursor", pending)
	}
	pending, err = op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: "us"})
	if err != nil || pending.Total != 1 {
		t.Errorf("ListPendingChanges(us): %+v, %v, want 1 pending", pending, err)
	}
}
