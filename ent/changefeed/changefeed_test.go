package changefeed_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
)

// Short names for expected change rows: "<type>/<resource id>/<region>".
func topo(dep, region string) string  { return "deployment_topology/" + dep + "/" + region }
func sent(id, region string) string   { return "sentinel/" + id + "/" + region }
func policy(id, region string) string { return "cilium_network_policy/" + id + "/" + region }

type opCase struct {
	entity, op string
	run        func(ctx context.Context, tx *ent.Tx) error
	want       []string
}

// Every desired-state entity × every Ent operation: after commit exactly the
// expected change rows exist; after rollback neither they nor the state
// change do.
func TestEveryMutationEmitsItsChangeRows(t *testing.T) {
	client := storetest.New(t).Ent
	ctx := context.Background()

	for _, c := range opCases() {
		t.Run(c.entity+"/"+c.op, func(t *testing.T) {
			for _, commit := range []bool{true, false} {
				seedFixtures(t, client)
				mark := lastChange(t, client)
				before := stateDump(t, client)

				tx, err := client.Tx(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.run(ctx, tx); err != nil {
					tx.Rollback()
					t.Fatalf("%s %s: %v", c.entity, c.op, err)
				}
				if !commit {
					if err := tx.Rollback(); err != nil {
						t.Fatal(err)
					}
					if got := changesAfter(t, client, mark); len(got) != 0 {
						t.Errorf("rollback left change rows %v", got)
					}
					if after := stateDump(t, client); after != before {
						t.Errorf("rollback left state changes:\nbefore %s\nafter  %s", before, after)
					}
					continue
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				got := changesAfter(t, client, mark)
				want := slices.Clone(c.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("change rows after commit:\n got  %v\n want %v", got, want)
				}
				if len(want) > 0 && stateDump(t, client) == before {
					t.Errorf("committed %s %s changed no state", c.entity, c.op)
				}
			}
		})
	}
}

func opCases() []opCase {
	topologyID := func(ctx context.Context, tx *ent.Tx, dep, region string) int {
		return tx.DeploymentTopology.Query().
			Where(deploymenttopology.DeploymentID(dep), deploymenttopology.Region(region)).
			OnlyIDX(ctx)
	}
	newSentinel := func(tx *ent.Tx, id, env, region string) *ent.SentinelCreate {
		return tx.Sentinel.Create().SetID(id).SetWorkspaceID("w1").SetEnvironmentID(env).SetRegion(region).
			SetImage("sentinel:2").SetReplicas(2).SetCPUMillicores(100).SetMemoryMib(64)
	}
	newPolicy := func(tx *ent.Tx, id, region, name string) *ent.CiliumNetworkPolicyCreate {
		return tx.CiliumNetworkPolicy.Create().SetID(id).SetWorkspaceID("w1").SetEnvironmentID("e1").
			SetRegion(region).SetName(name).SetSpec(map[string]any{"endpointSelector": map[string]any{"v": 2}})
	}
	newDeployment := func(tx *ent.Tx, id, image string) *ent.DeploymentCreate {
		return tx.Deployment.Create().SetID(id).SetWorkspaceID("w1").SetEnvironmentID("e1").
			SetImage(image).SetCPUMillicores(250).SetMemoryMib(256)
	}
	return []opCase{
		// deployment_topology
		{"topology", "create", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r2").SetReplicas(1).Exec(ctx)
		}, []string{topo("d2", "r2")}},
		{"topology", "create-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.CreateBulk(
				tx.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r2").SetReplicas(1),
				tx.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r3").SetReplicas(1),
			).Exec(ctx)
		}, []string{topo("d2", "r2"), topo("d2", "r3")}},
		{"topology", "upsert", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.Create().SetDeploymentID("d1").SetRegion("r1").SetReplicas(5).
				OnConflictColumns(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion).
				UpdateNewValues().Exec(ctx)
		}, []string{topo("d1", "r1")}},
		{"topology", "upsert-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.CreateBulk(
				tx.DeploymentTopology.Create().SetDeploymentID("d1").SetRegion("r1").SetReplicas(5),
				tx.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r3").SetReplicas(5),
			).OnConflict(sql.ConflictColumns(deploymenttopology.FieldDeploymentID, deploymenttopology.FieldRegion)).
				UpdateNewValues().Exec(ctx)
		}, []string{topo("d1", "r1"), topo("d2", "r3")}},
		{"topology", "update-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.UpdateOneID(topologyID(ctx, tx, "d1", "r1")).SetReplicas(3).Exec(ctx)
		}, []string{topo("d1", "r1")}},
		{"topology", "update", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID("d1")).
				SetDesiredStatus(deploymenttopology.DesiredStatusStopped).Exec(ctx)
		}, []string{topo("d1", "r1"), topo("d1", "r2")}},
		{"topology", "update-add", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.Update().Where(deploymenttopology.Region("r1")).AddReplicas(1).Exec(ctx)
		}, []string{topo("d1", "r1"), topo("d2", "r1")}},
		{"topology", "delete-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.DeploymentTopology.DeleteOneID(topologyID(ctx, tx, "d1", "r2")).Exec(ctx)
		}, []string{topo("d1", "r2")}},
		{"topology", "delete", func(ctx context.Context, tx *ent.Tx) error {
			_, err := tx.DeploymentTopology.Delete().Where(deploymenttopology.Region("r1")).Exec(ctx)
			return err
		}, []string{topo("d1", "r1"), topo("d2", "r1")}},

		// sentinels
		{"sentinel", "create", func(ctx context.Context, tx *ent.Tx) error {
			return newSentinel(tx, "s3", "e2", "r1").Exec(ctx)
		}, []string{sent("s3", "r1")}},
		{"sentinel", "create-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Sentinel.CreateBulk(newSentinel(tx, "s3", "e2", "r1"), newSentinel(tx, "s4", "e2", "r2")).Exec(ctx)
		}, []string{sent("s3", "r1"), sent("s4", "r2")}},
		{"sentinel", "upsert", func(ctx context.Context, tx *ent.Tx) error {
			// A new ID for an existing (environment, region): the change
			// row must name the row that really changed, s1.
			return newSentinel(tx, "s9", "e1", "r1").SetReplicas(7).
				OnConflictColumns(sentinel.FieldEnvironmentID, sentinel.FieldRegion).UpdateNewValues().Exec(ctx)
		}, []string{sent("s1", "r1")}},
		{"sentinel", "upsert-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Sentinel.CreateBulk(newSentinel(tx, "s9", "e1", "r1"), newSentinel(tx, "s5", "e2", "r3")).
				OnConflict(sql.ConflictColumns(sentinel.FieldEnvironmentID, sentinel.FieldRegion)).UpdateNewValues().Exec(ctx)
		}, []string{sent("s1", "r1"), sent("s5", "r3")}},
		{"sentinel", "update-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Sentinel.UpdateOneID("s1").SetImage("sentinel:3").Exec(ctx)
		}, []string{sent("s1", "r1")}},
		{"sentinel", "update", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Sentinel.Update().Where(sentinel.EnvironmentID("e1")).SetReplicas(4).Exec(ctx)
		}, []string{sent("s1", "r1"), sent("s2", "r2")}},
		{"sentinel", "delete-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Sentinel.DeleteOneID("s2").Exec(ctx)
		}, []string{sent("s2", "r2")}},
		{"sentinel", "delete", func(ctx context.Context, tx *ent.Tx) error {
			_, err := tx.Sentinel.Delete().Where(sentinel.Region("r1")).Exec(ctx)
			return err
		}, []string{sent("s1", "r1")}},

		// cilium_network_policies
		{"policy", "create", func(ctx context.Context, tx *ent.Tx) error {
			return newPolicy(tx, "p3", "r3", "n3").Exec(ctx)
		}, []string{policy("p3", "r3")}},
		{"policy", "create-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.CiliumNetworkPolicy.CreateBulk(newPolicy(tx, "p3", "r3", "n3"), newPolicy(tx, "p4", "r1", "n4")).Exec(ctx)
		}, []string{policy("p3", "r3"), policy("p4", "r1")}},
		{"policy", "upsert", func(ctx context.Context, tx *ent.Tx) error {
			return newPolicy(tx, "p9", "r1", "n1").
				OnConflictColumns(ciliumnetworkpolicy.FieldRegion, ciliumnetworkpolicy.FieldEnvironmentID, ciliumnetworkpolicy.FieldName).
				UpdateSpec().Exec(ctx)
		}, []string{policy("p1", "r1")}},
		{"policy", "upsert-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.CiliumNetworkPolicy.CreateBulk(newPolicy(tx, "p9", "r1", "n1"), newPolicy(tx, "p3", "r3", "n3")).
				OnConflict(sql.ConflictColumns(ciliumnetworkpolicy.FieldRegion, ciliumnetworkpolicy.FieldEnvironmentID, ciliumnetworkpolicy.FieldName)).
				UpdateSpec().Exec(ctx)
		}, []string{policy("p1", "r1"), policy("p3", "r3")}},
		{"policy", "update-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.CiliumNetworkPolicy.UpdateOneID("p2").SetSpec(map[string]any{"x": 1}).Exec(ctx)
		}, []string{policy("p2", "r2")}},
		{"policy", "update", func(ctx context.Context, tx *ent.Tx) error {
			return tx.CiliumNetworkPolicy.Update().Where(ciliumnetworkpolicy.EnvironmentID("e1")).SetSpec(map[string]any{"x": 2}).Exec(ctx)
		}, []string{policy("p1", "r1"), policy("p2", "r2")}},
		{"policy", "delete-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.CiliumNetworkPolicy.DeleteOneID("p1").Exec(ctx)
		}, []string{policy("p1", "r1")}},
		{"policy", "delete", func(ctx context.Context, tx *ent.Tx) error {
			_, err := tx.CiliumNetworkPolicy.Delete().Where(ciliumnetworkpolicy.RegionIn("r1", "r2")).Exec(ctx)
			return err
		}, []string{policy("p1", "r1"), policy("p2", "r2")}},

		// deployments: regions run their topologies' copies of the spec,
		// so only a delete of a deployment (cascading its children) is
		// news to agents
		{"deployment", "create", func(ctx context.Context, tx *ent.Tx) error {
			return newDeployment(tx, "d3", "app:1").Exec(ctx)
		}, nil},
		{"deployment", "create-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.CreateBulk(newDeployment(tx, "d3", "app:1"), newDeployment(tx, "d4", "app:1")).Exec(ctx)
		}, nil},
		{"deployment", "upsert", func(ctx context.Context, tx *ent.Tx) error {
			return newDeployment(tx, "d1", "app:2").OnConflict().UpdateNewValues().Exec(ctx)
		}, nil},
		{"deployment", "upsert-bulk", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.CreateBulk(newDeployment(tx, "d1", "app:2"), newDeployment(tx, "d2", "app:2")).
				OnConflict().UpdateNewValues().Exec(ctx)
		}, nil},
		{"deployment", "update-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d1").SetImage("app:2").Exec(ctx)
		}, nil},
		{"deployment", "update-one-env", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d2").SetEnv(map[string]string{"A": "b"}).Exec(ctx)
		}, nil},
		{"deployment", "update", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.Update().Where(deployment.EnvironmentID("e1")).SetMemoryMib(512).Exec(ctx)
		}, nil},
		{"deployment", "update-workflow-only", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d1").SetWorkflowStatus(deployment.WorkflowStatusDeploying).Exec(ctx)
		}, nil},
		{"deployment", "delete-one", func(ctx context.Context, tx *ent.Tx) error {
			return tx.Deployment.DeleteOneID("d1").Exec(ctx)
		}, []string{topo("d1", "r1"), topo("d1", "r2"), policy("p1", "r1")}},
		{"deployment", "delete", func(ctx context.Context, tx *ent.Tx) error {
			_, err := tx.Deployment.Delete().Where(deployment.IDIn("d1", "d2")).Exec(ctx)
			return err
		}, []string{topo("d1", "r1"), topo("d1", "r2"), topo("d2", "r1"), policy("p1", "r1")}},
	}
}

// seedFixtures resets desired state to: deployments d1 (regions r1, r2) and
// d2 (r1); sentinels s1 (e1, r1) and s2 (e1, r2); policies p1 (r1, owned by
// d1) and p2 (r2, environment-wide).
func seedFixtures(t *testing.T, client *ent.Client) {
	t.Helper()
	ctx := context.Background()
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		if _, err := tx.Deployment.Delete().Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.Sentinel.Delete().Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.CiliumNetworkPolicy.Delete().Exec(ctx); err != nil {
			return err
		}
		for _, d := range []struct {
			id      string
			regions []string
		}{{"d1", []string{"r1", "r2"}}, {"d2", []string{"r1"}}} {
			if err := tx.Deployment.Create().SetID(d.id).SetWorkspaceID("w1").SetEnvironmentID("e1").
				SetImage("app:1").SetCPUMillicores(250).SetMemoryMib(256).Exec(ctx); err != nil {
				return err
			}
			for _, r := range d.regions {
				if err := tx.DeploymentTopology.Create().SetDeploymentID(d.id).SetRegion(r).SetReplicas(2).Exec(ctx); err != nil {
					return err
				}
			}
		}
		for _, s := range [][2]string{{"s1", "r1"}, {"s2", "r2"}} {
			if err := tx.Sentinel.Create().SetID(s[0]).SetWorkspaceID("w1").SetEnvironmentID("e1").SetRegion(s[1]).
				SetImage("sentinel:1").SetReplicas(1).SetCPUMillicores(100).SetMemoryMib(64).Exec(ctx); err != nil {
				return err
			}
		}
		spec := map[string]any{"endpointSelector": map[string]any{}}
		if err := tx.CiliumNetworkPolicy.Create().SetID("p1").SetWorkspaceID("w1").SetEnvironmentID("e1").
			SetDeploymentID("d1").SetRegion("r1").SetName("n1").SetSpec(spec).Exec(ctx); err != nil {
			return err
		}
		return tx.CiliumNetworkPolicy.Create().SetID("p2").SetWorkspaceID("w1").SetEnvironmentID("e1").
			SetRegion("r2").SetName("n2").SetSpec(spec).Exec(ctx)
	})
	if err != nil {
		t.Fatalf("seed fixtures: %v", err)
	}
}

func lastChange(t *testing.T, client *ent.Client) uint64 {
	t.Helper()
	id, err := client.DeploymentChange.Query().Order(ent.Desc(deploymentchange.FieldID)).FirstID(context.Background())
	if ent.IsNotFound(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// changesAfter lists the change rows above mark as sorted short names.
func changesAfter(t *testing.T, client *ent.Client, mark uint64) []string {
	t.Helper()
	rows, err := client.DeploymentChange.Query().Where(deploymentchange.IDGT(mark)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(rows))
	for _, r := range rows {
		names = append(names, fmt.Sprintf("%s/%s/%s", r.ResourceType, r.ResourceID, r.Region))
	}
	slices.Sort(names)
	return names
}

// stateDump renders every desired-state row's desired fields, to compare
// state before and after.
func stateDump(t *testing.T, client *ent.Client) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	deployments, err := client.Deployment.Query().Order(ent.Asc(deployment.FieldID)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments {
		fmt.Fprintf(&b, "D %s %s %d %d %v %s;", d.ID, d.Image, d.CPUMillicores, d.MemoryMib, d.Env, d.WorkflowStatus)
	}
	topologies, err := client.DeploymentTopology.Query().Order(ent.Asc(deploymenttopology.FieldDeploymentID), ent.Asc(deploymenttopology.FieldRegion)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topologies {
		fmt.Fprintf(&b, "T %s %s %d %s;", tp.DeploymentID, tp.Region, tp.Replicas, tp.DesiredStatus)
	}
	sentinels, err := client.Sentinel.Query().Order(ent.Asc(sentinel.FieldID)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sentinels {
		fmt.Fprintf(&b, "S %s %s %s %d %d %d;", s.ID, s.Region, s.Image, s.Replicas, s.CPUMillicores, s.MemoryMib)
	}
	policies, err := client.CiliumNetworkPolicy.Query().Order(ent.Asc(ciliumnetworkpolicy.FieldID)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		fmt.Fprintf(&b, "P %s %s %s %v;", p.ID, p.Region, p.Name, p.Spec)
	}
	return b.String()
}

// A desired-state mutation outside a transaction is rejected with
// ErrNotInTx, for every entity and op, and writes nothing.
func TestMutationOutsideTransactionIsRejected(t *testing.T) {
	client := storetest.New(t).Ent
	ctx := context.Background()
	seedFixtures(t, client)
	mark := lastChange(t, client)
	before := stateDump(t, client)

	attempts := map[string]func() error{
		"topology create": func() error {
			return client.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r2").SetReplicas(1).Exec(ctx)
		},
		"topology update": func() error {
			return client.DeploymentTopology.Update().SetReplicas(9).Exec(ctx)
		},
		"topology delete": func() error {
			_, err := client.DeploymentTopology.Delete().Exec(ctx)
			return err
		},
		"sentinel create": func() error {
			return client.Sentinel.Create().SetID("s3").SetWorkspaceID("w").SetEnvironmentID("e3").SetRegion("r1").
				SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1).Exec(ctx)
		},
		"sentinel update-one": func() error { return client.Sentinel.UpdateOneID("s1").SetReplicas(9).Exec(ctx) },
		"sentinel delete-one": func() error { return client.Sentinel.DeleteOneID("s1").Exec(ctx) },
		"policy create": func() error {
			return client.CiliumNetworkPolicy.Create().SetID("p3").SetWorkspaceID("w").SetEnvironmentID("e1").
				SetRegion("r1").SetName("n3").SetSpec(map[string]any{"a": 1}).Exec(ctx)
		},
		"policy update-one": func() error {
			return client.CiliumNetworkPolicy.UpdateOneID("p1").SetSpec(map[string]any{"a": 2}).Exec(ctx)
		},
		"policy delete": func() error {
			_, err := client.CiliumNetworkPolicy.Delete().Exec(ctx)
			return err
		},
		"deployment create": func() error {
			return client.Deployment.Create().SetID("d3").SetWorkspaceID("w").SetEnvironmentID("e").
				SetImage("a:1").SetCPUMillicores(1).SetMemoryMib(1).Exec(ctx)
		},
		"deployment update-one": func() error { return client.Deployment.UpdateOneID("d1").SetImage("a:2").Exec(ctx) },
		"deployment delete-one": func() error { return client.Deployment.DeleteOneID("d1").Exec(ctx) },
	}
	for name, attempt := range attempts {
		if err := attempt(); !errors.Is(err, changefeed.ErrNotInTx) {
			t.Errorf("%s outside a transaction: got %v, want ErrNotInTx", name, err)
		}
	}
	if got := changesAfter(t, client, mark); len(got) != 0 {
		t.Errorf("rejected mutations wrote change rows %v", got)
	}
	if after := stateDump(t, client); after != before {
		t.Errorf("rejected mutations changed state:\nbefore %s\nafter  %s", before, after)
	}
}

// A deployment's topologies and policies are rows of their own tables;
// adding, removing or clearing them through the deployment's edges would
// rewrite their foreign keys past their hooks, so every such write is
// refused and writes nothing.
func TestDeploymentEdgeWritesAreRefused(t *testing.T) {
	client := storetest.New(t).Ent
	ctx := context.Background()
	seedFixtures(t, client)
	mark := lastChange(t, client)
	before := stateDump(t, client)
	topologyOfD1 := client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID("d1")).FirstIDX(ctx)

	attempts := map[string]func(tx *ent.Tx) error{
		"update-one add topology": func(tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d2").AddTopologyIDs(topologyOfD1).Exec(ctx)
		},
		"update-one remove topology": func(tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d1").RemoveTopologyIDs(topologyOfD1).Exec(ctx)
		},
		"update clear topologies": func(tx *ent.Tx) error { return tx.Deployment.Update().ClearTopologies().Exec(ctx) },
		"update-one add policy": func(tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d2").AddPolicyIDs("p1").Exec(ctx)
		},
		"update-one clear policies": func(tx *ent.Tx) error {
			return tx.Deployment.UpdateOneID("d1").ClearPolicies().Exec(ctx)
		},
		"create with a topology": func(tx *ent.Tx) error {
			return tx.Deployment.Create().SetID("d3").SetWorkspaceID("w1").SetEnvironmentID("e1").
				SetImage("a:1").SetCPUMillicores(1).SetMemoryMib(1).AddTopologyIDs(topologyOfD1).Exec(ctx)
		},
	}
	for name, attempt := range attempts {
		tx, err := client.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = attempt(tx)
		if !errors.Is(err, changefeed.ErrEdgeThroughParent) {
			t.Errorf("%s: got %v, want ErrEdgeThroughParent", name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := changesAfter(t, client, mark); len(got) != 0 {
		t.Errorf("refused edge writes left change rows %v", got)
	}
	if after := stateDump(t, client); after != before {
		t.Errorf("refused edge writes changed state:\nbefore %s\nafter  %s", before, after)
	}
}

// Actual state goes through changefeed.ActualState: no change row, no
// transaction needed, and only the actual-state fields of each entity.
func TestActualStatePathWritesOnlyActualFields(t *testing.T) {
	client := storetest.New(t).Ent
	ctx := context.Background()
	seedFixtures(t, client)
	mark := lastChange(t, client)
	actual := changefeed.ActualState(ctx)

	allowed := map[string]func() error{
		"topology actual_status": func() error {
			return client.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID("d1")).
				SetActualStatus(deploymenttopology.ActualStatusRunning).Exec(actual)
		},
		"sentinel available_replicas, health": func() error {
			return client.Sentinel.UpdateOneID("s1").SetAvailableReplicas(1).SetHealth(sentinel.HealthHealthy).Exec(actual)
		},
		"deployment workflow": func() error {
			return client.Deployment.UpdateOneID("d1").SetWorkflowStatus(deployment.WorkflowStatusReady).SetWorkflowError("").Exec(actual)
		},
		"instance (not desired state at all)": func() error {
			return client.Instance.Create().SetDeploymentID("d1").SetRegion("r1").SetPodName("d1-0").
				SetStatus("running").Exec(ctx)
		},
	}
	for name, write := range allowed {
		if err := write(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := changesAfter(t, client, mark); len(got) != 0 {
		t.Errorf("actual-state writes emitted change rows %v", got)
	}
	tp := client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID("d1"), deploymenttopology.Region("r2")).OnlyX(ctx)
	if tp.ActualStatus != deploymenttopology.ActualStatusRunning {
		t.Errorf("actual status not written: %s", tp.ActualStatus)
	}

	before := stateDump(t, client)
	refused := map[string]struct {
		field string
		write func() error
	}{
		"topology replicas": {"replicas", func() error {
			return client.DeploymentTopology.Update().SetReplicas(9).Exec(actual)
		}},
		"topology desired_status with actual": {"desired_status", func() error {
			return client.DeploymentTopology.Update().SetActualStatus("failed").SetDesiredStatus("stopped").Exec(actual)
		}},
		"sentinel image": {"image", func() error { return client.Sentinel.UpdateOneID("s1").SetImage("x:1").Exec(actual) }},
		"policy spec": {"spec", func() error {
			return client.CiliumNetworkPolicy.UpdateOneID("p1").SetSpec(map[string]any{"a": 1}).Exec(actual)
		}},
		"deployment image": {"image", func() error { return client.Deployment.UpdateOneID("d1").SetImage("x:1").Exec(actual) }},
		"topology create": {"", func() error {
			return client.DeploymentTopology.Create().SetDeploymentID("d2").SetRegion("r2").SetReplicas(1).Exec(actual)
		}},
		"sentinel delete": {"", func() error { return client.Sentinel.DeleteOneID("s1").Exec(actual) }},
	}
	for name, r := range refused {
		err := r.write()
		if !errors.Is(err, changefeed.ErrNotActualState) {
			t.Errorf("%s through ActualState: got %v, want ErrNotActualState", name, err)
			continue
		}
		if r.field != "" && !strings.Contains(err.Error(), `"`+r.field+`"`) {
			t.Errorf("%s: error %q does not name field %q", name, err, r.field)
		}
	}
	if got := changesAfter(t, client, mark); len(got) != 0 {
		t.Errorf("refused writes emitted change rows %v", got)
	}
	if after := stateDump(t, client); after != before {
		t.Errorf("refused writes changed state:\nbefore %s\nafter  %s", before, after)
	}
}
