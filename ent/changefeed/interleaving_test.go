package changefeed_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/internal/eventually"
)

// A child created for a deployment while another transaction deletes
// that deployment: the child's transaction commits first, the parent's
// statement waits on it. The parent's hook must see the child, or the
// child is cascaded away with no change row after its create, and its
// region's agent keeps it forever (I6). (A change of the deployment's own
// spec touches no child: regions run their topologies' copies.)
//
// The interleaving is forced, not hoped for: T2 writes the child and stays
// open; T1 starts and is observed waiting on T2's lock; T2 commits; T1
// finishes. Without locking reads in the hooks, T1 decided what it touches
// before it waited, from a snapshot without the child.
func TestParentMutationWaitingOnAChildInsertSeesTheChild(t *testing.T) {
	cases := []struct {
		name  string
		child func(ctx context.Context, tx *ent.Tx) error
		// The child as its change rows name it.
		childType   deploymentchange.ResourceType
		childID     string
		childRegion string
		parent      func(ctx context.Context, tx *ent.Tx) error
	}{
		{
			name: "policy created while its deployment is deleted",
			child: func(ctx context.Context, tx *ent.Tx) error {
				return tx.CiliumNetworkPolicy.Create().SetID("pol-x").SetWorkspaceID("w").SetEnvironmentID("e").
					SetDeploymentID("dep-x").SetRegion("eu").SetName("allow").SetSpec(map[string]any{"a": 1}).Exec(ctx)
			},
			childType: deploymentchange.ResourceTypeCiliumNetworkPolicy, childID: "pol-x", childRegion: "eu",
			parent: func(ctx context.Context, tx *ent.Tx) error {
				_, err := tx.Deployment.Delete().Where(deployment.ID("dep-x")).Exec(ctx)
				return err
			},
		},
		{
			name: "topology created while its deployment is deleted",
			child: func(ctx context.Context, tx *ent.Tx) error {
				return tx.DeploymentTopology.Create().SetDeploymentID("dep-x").SetRegion("us").SetReplicas(1).Exec(ctx)
			},
			childType: deploymentchange.ResourceTypeDeploymentTopology, childID: "dep-x", childRegion: "us",
			parent: func(ctx context.Context, tx *ent.Tx) error {
				return tx.Deployment.DeleteOneID("dep-x").Exec(ctx)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := storetest.New(t)
			client := db.Ent
			ctx := context.Background()
			err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
				if err := tx.Deployment.Create().SetID("dep-x").SetWorkspaceID("w").SetEnvironmentID("e").
					SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).Exec(ctx); err != nil {
					return err
				}
				return tx.DeploymentTopology.Create().SetDeploymentID("dep-x").SetRegion("eu").SetReplicas(1).Exec(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}

			t2, err := client.Tx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer t2.Rollback()
			if err := tc.child(ctx, t2); err != nil {
				t.Fatal(err)
			}
			t1 := make(chan error, 1)
			go func() { t1 <- store.WithTx(ctx, client, func(tx *ent.Tx) error { return tc.parent(ctx, tx) }) }()
			eventually.True(t, 30*time.Second, "no transaction waited for the child's lock", func() bool {
				select {
				case err := <-t1:
					t.Fatalf("the parent's transaction did not wait for the child's lock (it ended: %v)", err)
				default:
				}
				return lockWaiting(t, db.SQL)
			})
			if err := t2.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-t1; err != nil {
				t.Fatal(err)
			}

			n, err := client.DeploymentChange.Query().
				Where(deploymentchange.ResourceTypeEQ(tc.childType), deploymentchange.ResourceID(tc.childID), deploymentchange.Region(tc.childRegion)).
				Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The child's own create wrote one row; the parent's statement,
			// which committed after it and changed it, must write another.
			if n != 2 {
				t.Fatalf("the child has %d change rows, want 2 (its create, then the parent's change that reached it)", n)
			}
		})
	}
}

// lockWaiting reports whether a statement on this test's database waits
// (for a row lock: nothing else runs there).
func lockWaiting(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var n int
	// A statement of this database running for 200ms is waiting: the
	// test's statements take a few milliseconds. (INNODB_TRX does not
	// list a locking read that waits while the optimizer reads a
	// constant row, so ask the process list.)
	err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute') AND TIME_MS > 200`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}
