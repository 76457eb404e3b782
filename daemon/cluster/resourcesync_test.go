package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/resourcesync"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// syncRows reads the stored sync state of region's resources, by
// "kind/id".
func syncRows(t *testing.T, env *servertest.Env, region string) map[string]*ent.ResourceSync {
	t.Helper()
	rows, err := env.DB.Ent.ResourceSync.Query().Where(resourcesync.Region(region)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ent.ResourceSync{}
	for _, r := range rows {
		out[string(r.Kind)+"/"+r.ResourceID] = r
	}
	return out
}

// An agent's per-resource report is stored for the resources its region
// desires: a failing apply with its error and since when, replaced by
// in-sync once it applies, and forgotten once its delete is applied.
// Reports on resources the region does not desire are ignored, so an agent
// token cannot fill the table.
func TestResourceSyncReportsAreStoredForTheRegionsOwnResources(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	op := env.Operator("alice")
	env.AgentToken("us") // registers the region
	deploy(t, op, "api", "eu")
	deploy(t, op, "db", "eu")
	deploy(t, op, "web", "us")
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)

	report := func(rs ...*ctrlv1.ResourceSync) {
		t.Helper()
		if _, err := agent.ReportResourceSync(ctx, &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: rs}); err != nil {
			t.Fatal(err)
		}
	}
	report(
		&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", Error: "admission webhook denied", FailingSince: timestamppb.New(since)},
		&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "db", InSync: true},
		&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "web", InSync: true},   // desired in us, not eu
		&ctrlv1.ResourceSync{Kind: "sentinel", ResourceId: "made-up", InSync: true}, // desired nowhere
	)
	rows := syncRows(t, env, "eu")
	if len(rows) != 2 || rows["deployment/db"] == nil || !rows["deployment/db"].InSync || rows["deployment/db"].FailingSince != nil {
		t.Fatalf("stored %v, want deployment/api failing and deployment/db in sync", rows)
	}
	api := rows["deployment/api"]
	if api == nil || api.InSync || api.Error != "admission webhook denied" || api.FailingSince == nil || !api.FailingSince.Equal(since) {
		t.Fatalf("failing apply stored as %+v", api)
	}

	head, err := changelog.NewestVersion(ctx, env.DB.SQL)
	if err != nil {
		t.Fatal(err)
	}
	report(&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", AppliedVersion: head, InSync: true})
	api = syncRows(t, env, "eu")["deployment/api"]
	if !api.InSync || api.Error != "" || api.FailingSince != nil || api.AppliedVersion != head {
		t.Fatalf("after a successful apply stored as %+v, want in sync at %d with no error", api, head)
	}

	report(&ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", Deleted: true})
	if rows := syncRows(t, env, "eu"); len(rows) != 1 || rows["deployment/api"] != nil {
		t.Fatalf("after api's delete was applied, rows are %v, want only db's", rows)
	}
}

// A bad report is refused whole, naming the field, and stores nothing.
func TestResourceSyncReportWithBadFieldsIsRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx := context.Background()
	agent := env.Agent("eu")
	deploy(t, env.Operator("alice"), "api", "eu")
	good := &ctrlv1.ResourceSync{Kind: "deployment", ResourceId: "api", InSync: true}
	many := make([]*ctrlv1.ResourceSync, 501)
	for i := range many {
		many[i] = good
	}
	cases := []struct {
		name  string
		req   *ctrlv1.ReportResourceSyncRequest
		field string
	}{
		{"another region", &ctrlv1.ReportResourceSyncRequest{Region: "us", Resources: []*ctrlv1.ResourceSync{good}}, "region"},
		{"too many", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: many}, "resources"},
		{"unknown kind", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{good, {Kind: "pod", ResourceId: "api"}}}, "resources[1].kind"},
		{"bad id", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "../x"}}}, "resources[0].resource_id"},
		{"twice", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{good, good}}, "listed twice"},
		{"version from the future", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "api", AppliedVersion: 1 << 40}}}, "applied_version"},
		{"received version from the future", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "api", ReceivedVersion: 1 << 40}}}, "received_version"},
		{"version beyond int64", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "api", AppliedVersion: 1 << 63}}}, "applied_version"},
		{"huge error", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "api", Error: strings.Repeat("x", 4096)}}}, "resources[0].error"},
		{"since in the future", &ctrlv1.ReportResourceSyncRequest{Region: "eu", Resources: []*ctrlv1.ResourceSync{{Kind: "deployment", ResourceId: "api", Error: "e", FailingSince: timestamppb.New(time.Now().Add(time.Hour))}}}, "failing_since"},
	}
	for _, c := range cases {
		_, err := agent.ReportResourceSync(ctx, c.req)
		if c.name == "another region" {
			if err == nil {
				t.Errorf("%s: accepted", c.name)
			}
			continue
		}
		wantInvalid(t, c.name, err, c.field)
	}
	if rows := syncRows(t, env, "eu"); len(rows) != 0 {
		t.Fatalf("refused reports stored rows: %v", rows)
	}
}
