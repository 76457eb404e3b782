package kinds_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
)

// A full sync's page reads about as many rows as it returns, however far
// into the region it starts. A page that walked the region from its first
// row to reach its keyset start made a full sync of n resources read n²/2
// rows over its n/limit pages: at 100,000 deployments the last pages
// each walked 90,000 index entries (MariaDB picks a ref lookup on the
// region with the key pushed down as a filter, unless told to read the
// index as a range on region and key).
func TestAPageReadsWhatItReturnsNotTheRegionBeforeIt(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	const perRegion, limit = 3000, 50
	// The optimizer's choice follows the tables' statistics, which InnoDB
	// recalculates in the background as rows come: frozen here as they
	// were for the empty tables, and then, below, brought up to date.
	for _, table := range stateTables {
		if _, err := db.SQL.ExecContext(ctx, "ALTER TABLE "+table+" STATS_AUTO_RECALC = 0"); err != nil {
			t.Fatal(err)
		}
	}
	// Two regions, their rows interleaved, so that a page cannot look
	// cheap by reading the whole table in key order either.
	for start := 0; start < perRegion; start += 500 {
		err := store.WithTx(ctx, db.Ent, func(tx *ent.Tx) error {
			var deps []*ent.DeploymentCreate
			var tops []*ent.DeploymentTopologyCreate
			var sens []*ent.SentinelCreate
			var pols []*ent.CiliumNetworkPolicyCreate
			for i := start; i < start+500; i++ {
				for _, region := range []string{"eu", "us"} {
					id := fmt.Sprintf("dep-%05d-%s", i, region)
					deps = append(deps, tx.Deployment.Create().SetID(id).SetWorkspaceID("ws").SetEnvironmentID("prod").
						SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64))
					tops = append(tops, tx.DeploymentTopology.Create().SetDeploymentID(id).SetRegion(region).SetNamespace("ws-prod").SetReplicas(1).SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).SetPort(8080).SetSpecHash("app-1"))
					sens = append(sens, tx.Sentinel.Create().SetID(fmt.Sprintf("sen-%05d-%s", i, region)).
						SetWorkspaceID("ws").SetEnvironmentID(fmt.Sprintf("env-%05d", i)).SetRegion(region).
						SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1))
					pols = append(pols, tx.CiliumNetworkPolicy.Create().SetID(fmt.Sprintf("pol-%05d-%s", i, region)).
						SetWorkspaceID("ws").SetEnvironmentID("prod").SetRegion(region).SetName(fmt.Sprintf("p%05d", i)).
						SetSpec(map[string]any{"endpointSelector": map[string]any{}}))
				}
			}
			if err := tx.Deployment.CreateBulk(deps...).Exec(ctx); err != nil {
				return err
			}
			if err := tx.DeploymentTopology.CreateBulk(tops...).Exec(ctx); err != nil {
				return err
			}
			if err := tx.Sentinel.CreateBulk(sens...).Exec(ctx); err != nil {
				return err
			}
			return tx.CiliumNetworkPolicy.CreateBulk(pols...).Exec(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Policies of many regions, between eu's in key order where the page
	// is read: a page read in key order (the primary key) would walk them.
	err := store.WithTx(ctx, db.Ent, func(tx *ent.Tx) error {
		var pols []*ent.CiliumNetworkPolicyCreate
		for i := perRegion - 3*limit; i < perRegion; i++ {
			for r := range 20 {
				region := fmt.Sprintf("r%02d", r)
				pols = append(pols, tx.CiliumNetworkPolicy.Create().SetID(fmt.Sprintf("pol-%05d-%s", i, region)).
					SetWorkspaceID("ws").SetEnvironmentID("prod").SetRegion(region).SetName(fmt.Sprintf("p%05d", i)).
					SetSpec(map[string]any{"endpointSelector": map[string]any{}}))
			}
		}
		return tx.CiliumNetworkPolicy.CreateBulk(pols...).Exec(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}

	// One connection, so that its session counters are the page's.
	conn, err := db.StreamSQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ent.NewClient(ent.Driver(entsql.NewDriver(dialect.MySQL, entsql.Conn{ExecQuerier: conn})))

	for _, stats := range []string{"frozen", "fresh"} {
		if stats == "fresh" {
			if _, err := db.SQL.ExecContext(ctx, "ANALYZE TABLE "+strings.Join(stateTables, ", ")); err != nil {
				t.Fatal(err)
			}
		}
		for _, kind := range kinds.All {
			checkPageCost(t, ctx, client, conn, kind, stats, perRegion, limit)
		}
	}
}

// checkPageCost reads the page before the last of kind's resources in
// region eu (of perRegion), limit long, and counts what the database read
// for it.
func checkPageCost(t *testing.T, ctx context.Context, client *ent.Client, conn *sql.Conn, kind kinds.Kind, stats string, perRegion, limit int) {
	t.Helper()
	skipped, after, err := kind.Page(ctx, client, "eu", "", perRegion-2*limit)
	if err != nil || len(skipped) != perRegion-2*limit {
		t.Fatalf("kind %s: the first %d: %d events, %v", kind.Name, perRegion-2*limit, len(skipped), err)
	}
	before := rowsRead(t, conn)
	events, _, err := kind.Page(ctx, client, "eu", after, limit)
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsRead(t, conn) - before
	if len(events) != limit {
		t.Fatalf("kind %s: the page near the end holds %d events, want %d", kind.Name, len(events), limit)
	}
	// A row of the page costs a few reads (an index entry, its row, the
	// joined row); the region before the page is 2,900 rows.
	t.Logf("kind %s, %s statistics: a page of %d near the end read %d rows", kind.Name, stats, limit, rows)
	if rows > 10*limit {
		t.Errorf("kind %s, %s statistics: a page of %d near the end of a region of %d read %d rows",
			kind.Name, stats, limit, perRegion, rows)
	}
}

// stateTables are the tables full syncs page through.
var stateTables = []string{"deployment_topology", "deployments", "sentinels", "cilium_network_policies"}

// rowsRead is how many rows and index entries the connection's session
// has read so far, those its storage engine filtered by a pushed-down
// condition (Handler_icp_attempts) included.
func rowsRead(t *testing.T, conn *sql.Conn) int {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), "SHOW SESSION STATUS WHERE Variable_name IN "+
		"('Handler_read_first', 'Handler_read_key', 'Handler_read_next', 'Handler_read_rnd_next', 'Handler_icp_attempts')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		var name string
		var value int
		if err := rows.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		total += value
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
