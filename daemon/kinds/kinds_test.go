package kinds_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/resourcesync"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Each kind states which resources a region desires twice: as an Ent
// query (Desired, for agents' sync reports) and as SQL (DesiredSQL, for
// retention's sweep and region health). They must agree: a sync row one
// keeps and the other sweeps or hides would show a failure that is not
// there, or hide one that is.
func TestDesiredAndDesiredSQLAgree(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	c := db.Ent
	// Desired state is written in transactions only (the change feed's
	// rows commit with it).
	tx, err := c.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := tx.Client()
	for _, d := range []struct{ id, region string }{{"dep-eu", "eu"}, {"dep-us", "us"}} {
		w.Deployment.Create().SetID(d.id).SetWorkspaceID("ws").SetEnvironmentID("prod").
			SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).ExecX(ctx)
		w.DeploymentTopology.Create().SetDeploymentID(d.id).SetRegion(d.region).SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1").ExecX(ctx)
	}
	// A stopped deployment is still desired: its sync row says how its
	// stop went.
	w.Deployment.Create().SetID("dep-stopped").SetWorkspaceID("ws").SetEnvironmentID("prod").
		SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).ExecX(ctx)
	w.DeploymentTopology.Create().SetDeploymentID("dep-stopped").SetRegion("eu").SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1").
		SetDesiredStatus("stopped").ExecX(ctx)
	for _, s := range []struct{ id, env, region string }{{"sen-eu", "prod", "eu"}, {"sen-us", "prod", "us"}, {"sen-stopped", "dev", "eu"}} {
		create := w.Sentinel.Create().SetID(s.id).SetWorkspaceID("ws").SetEnvironmentID(s.env).SetRegion(s.region).
			SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1)
		if s.id == "sen-stopped" {
			create.SetDesiredState(sentinel.DesiredStateStopped)
		}
		create.ExecX(ctx)
	}
	for _, p := range []struct{ id, region string }{{"pol-eu", "eu"}, {"pol-us", "us"}} {
		w.CiliumNetworkPolicy.Create().SetID(p.id).SetWorkspaceID("ws").SetEnvironmentID("prod").SetRegion(p.region).
			SetName(p.id).SetSpec(map[string]any{"endpointSelector": map[string]any{}}).ExecX(ctx)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	reported := map[string][]string{
		"deployment":            {"dep-eu", "dep-us", "dep-stopped", "dep-gone"},
		"sentinel":              {"sen-eu", "sen-us", "sen-stopped", "sen-gone"},
		"cilium_network_policy": {"pol-eu", "pol-us", "pol-gone"},
	}
	if len(reported) != len(kinds.All) {
		t.Fatalf("the test covers %d kinds, the registry has %d", len(reported), len(kinds.All))
	}
	for _, kind := range kinds.All {
		ids := reported[kind.Name]
		if len(ids) == 0 {
			t.Fatalf("kind %s: no resources to check", kind.Name)
		}
		var rows []*ent.ResourceSyncCreate
		for _, id := range ids {
			rows = append(rows, c.ResourceSync.Create().SetRegion("eu").SetKind(resourcesync.Kind(kind.Name)).SetResourceID(id))
		}
		c.ResourceSync.CreateBulk(rows...).ExecX(ctx)

		byEnt, err := kind.Desired(ctx, c, "eu", ids)
		if err != nil {
			t.Fatal(err)
		}
		bySQL := queryStrings(t, db.SQL, "SELECT s.resource_id FROM resource_syncs s WHERE s.region = 'eu' AND s.kind = ? AND EXISTS ("+kind.DesiredSQL+")", kind.Name)
		slices.Sort(byEnt)
		slices.Sort(bySQL)
		if !slices.Equal(byEnt, bySQL) {
			t.Errorf("kind %s: Desired says %v, DesiredSQL says %v", kind.Name, byEnt, bySQL)
		}
		// Only the eu resources, stopped or not, and never the gone ones.
		for _, id := range byEnt {
			if strings.HasSuffix(id, "-us") || strings.HasSuffix(id, "-gone") {
				t.Errorf("kind %s: %s is desired in eu", kind.Name, id)
			}
		}
		if len(byEnt) == 0 {
			t.Errorf("kind %s: nothing desired in eu", kind.Name)
		}
	}
}

func queryStrings(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A full sync's pages hold every resource the region runs, once, and
// nothing stopped or elsewhere, however the keyset splits them; an event
// carries the resource's whole state.
func TestPagesHoldWhatTheRegionRuns(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	tx, err := db.Ent.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := tx.Client()
	// Deployments of other environments, with and without a command and
	// env, one after the other in a page: none may show another's.
	for _, d := range []struct {
		id, region, workspace, env string
		stopped                    bool
		command                    []string
		vars                       map[string]string
	}{
		{"dep-a", "eu", "ws", "prod", false, []string{"serve", "--fast"}, map[string]string{"A": "1"}},
		{"dep-b", "eu", "ws", "prod", true, nil, nil},
		{"dep-c", "us", "ws", "prod", false, nil, nil},
		{"dep-d", "eu", "ws", "dev", false, nil, nil},
		{"dep-e", "eu", "ws2", "prod", false, []string{"run"}, map[string]string{"E": "5"}},
	} {
		create := w.Deployment.Create().SetID(d.id).SetWorkspaceID(d.workspace).SetEnvironmentID(d.env).
			SetImage("app:" + d.id).SetCPUMillicores(100).SetMemoryMib(64)
		if d.command != nil {
			create.SetPort(9090).SetCommand(d.command).SetEnv(d.vars)
		}
		create.ExecX(ctx)
		topology := w.DeploymentTopology.Create().SetDeploymentID(d.id).SetRegion(d.region).SetReplicas(3).
			SetImage("app:" + d.id).SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash(d.id)
		if d.command != nil {
			topology.SetPort(9090).SetCommand(d.command).SetEnv(d.vars)
		}
		if d.stopped {
			topology.SetDesiredStatus("stopped")
		}
		topology.ExecX(ctx)
	}
	for _, s := range []struct{ id, env, region string }{{"sen-a", "prod", "eu"}, {"sen-b", "dev", "eu"}, {"sen-c", "prod", "us"}} {
		create := w.Sentinel.Create().SetID(s.id).SetWorkspaceID("ws").SetEnvironmentID(s.env).SetRegion(s.region).
			SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1)
		if s.id == "sen-b" {
			create.SetDesiredState(sentinel.DesiredStateStopped)
		}
		create.ExecX(ctx)
	}
	for _, p := range []struct{ id, region string }{{"pol-a", "eu"}, {"pol-b", "eu"}, {"pol-c", "us"}} {
		w.CiliumNetworkPolicy.Create().SetID(p.id).SetWorkspaceID("ws").SetEnvironmentID("prod").SetRegion(p.region).
			SetName(p.id).SetSpec(map[string]any{"endpointSelector": map[string]any{}}).ExecX(ctx)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{
		"deployment":            {"dep-a", "dep-d", "dep-e"},
		"sentinel":              {"sen-a"},
		"cilium_network_policy": {"pol-a", "pol-b"},
	}
	// Pages of one (every boundary is a page boundary) and one page for all.
	for _, size := range []int{1, 10} {
		for _, kind := range kinds.All {
			checkPages(t, ctx, db.Ent, kind, size, want[kind.Name])
		}
	}

	events, _, err := kinds.All[0].Page(ctx, db.Ent, "eu", "", 10)
	if err != nil || len(events) != 3 {
		t.Fatalf("deployment page: %d events, %v", len(events), err)
	}
	// Not the workspace and environment IDs, which agents do not read.
	wants := []*ctrlv1.DeploymentState{
		{DeploymentId: "dep-a", Namespace: naming.Namespace("ws", "prod"), Image: "app:dep-a", Replicas: 3, CpuMillicores: 100,
			MemoryMib: 64, Port: 9090, Command: []string{"serve", "--fast"}, Env: map[string]string{"A": "1"}, SpecHash: "dep-a"},
		{DeploymentId: "dep-d", Namespace: naming.Namespace("ws", "dev"), Image: "app:dep-d", Replicas: 3, CpuMillicores: 100,
			MemoryMib: 64, Port: 8080, SpecHash: "dep-d"},
		{DeploymentId: "dep-e", Namespace: naming.Namespace("ws2", "prod"), Image: "app:dep-e", Replicas: 3, CpuMillicores: 100,
			MemoryMib: 64, Port: 9090, Command: []string{"run"}, Env: map[string]string{"E": "5"}, SpecHash: "dep-e"},
	}
	for i, want := range wants {
		if got := events[i].Event.GetDeployment().GetDeployment(); !proto.Equal(got, want) {
			t.Errorf("event %d carries %v, want %v", i, got, want)
		}
	}
}

// checkPages reads kind's resources in eu in pages of size and checks that
// they are want, each once, as applies that say what a live change's
// loaded event says.
func checkPages(t *testing.T, ctx context.Context, c *ent.Client, kind kinds.Kind, size int, want []string) {
	t.Helper()
	var got []string
	after := ""
	for range 10 {
		events, last, err := kind.Page(ctx, c, "eu", after, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			break
		}
		for _, e := range events {
			got = append(got, e.ID)
			if r, action, _ := rpc.ResourceOf(e.Event); r.ID != e.ID || action != ctrlv1.Action_ACTION_APPLY {
				t.Errorf("kind %s: page event for %s names %v, action %v", kind.Name, e.ID, r, action)
			}
			// A full sync and a live change say the same of a
			// resource: a field one reads and the other forgets
			// would differ by how the agent learned of it.
			loaded, err := kind.Load(ctx, c, "eu", []string{e.ID})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(loaded[e.ID], e.Event) {
				t.Errorf("kind %s: %s's page event %v differs from its loaded event %v", kind.Name, e.ID, e.Event, loaded[e.ID])
			}
			if set := unreadFieldsSet(e.Event); len(set) > 0 {
				t.Errorf("kind %s: %s's event sets %v, which agents do not read", kind.Name, e.ID, set)
			}
		}
		after = last
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kind %s, pages of %d: pages hold %v, want %v", kind.Name, size, got, want)
	}
}

// unreadFieldsSet lists the fields of an event's resource state that agents
// do not read and the stream leaves unset (state.proto), among those it
// sets.
func unreadFieldsSet(ev *ctrlv1.DeploymentChangeEvent) []string {
	var state proto.Message
	switch {
	case ev.GetDeployment() != nil:
		state = ev.GetDeployment().GetDeployment()
	case ev.GetSentinel() != nil:
		state = ev.GetSentinel().GetSentinel()
	case ev.GetCiliumNetworkPolicy() != nil:
		state = ev.GetCiliumNetworkPolicy().GetCiliumNetworkPolicy()
	default:
		return []string{fmt.Sprintf("unexpected event %T", ev.Event)}
	}
	m := state.ProtoReflect()
	var set []string
	for _, name := range []protoreflect.Name{"workspace_id", "environment_id"} {
		if fd := m.Descriptor().Fields().ByName(name); fd != nil && m.Has(fd) {
			set = append(set, string(name))
		}
	}
	return set
}
