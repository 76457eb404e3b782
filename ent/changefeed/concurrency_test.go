package changefeed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymentchange"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
)

// 32 writers mutate the same and different resources at once, each in its
// own transaction, some rolling back and some losing deadlocks; afterwards
// every (resource, region) has exactly one change row per committed
// mutation that touched it.
func TestConcurrentMutationsEmitOneRowPerCommit(t *testing.T) {
	client := storetest.New(t).Ent
	ctx := context.Background()
	const (
		writers    = 32
		iterations = 25
	)
	deps := []string{"d1", "d2", "d3", "d4"}
	regions := []string{"r1", "r2", "r3", "r4"}
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		for i, d := range deps {
			if err := tx.Deployment.Create().SetID(d).SetWorkspaceID("w").SetEnvironmentID("e").
				SetImage("app:1").SetCPUMillicores(100).SetMemoryMib(64).Exec(ctx); err != nil {
				return err
			}
			for _, r := range regions {
				if err := tx.DeploymentTopology.Create().SetDeploymentID(d).SetRegion(r).SetReplicas(1).Exec(ctx); err != nil {
					return err
				}
			}
			if err := tx.Sentinel.Create().SetID(fmt.Sprintf("s%d", i+1)).SetWorkspaceID("w").SetEnvironmentID(fmt.Sprintf("e%d", i+1)).
				SetRegion(regions[i]).SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mark := lastChange(t, client)

	var (
		mu                sync.Mutex
		committed         = map[string]int{}
		commits, failures int
		rollbacks         int
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range iterations {
				// Half the writers' ops hit one hot topology, the rest spread.
				dep, region := deps[rng.IntN(len(deps))], regions[rng.IntN(len(regions))]
				if rng.IntN(2) == 0 {
					dep, region = "d1", "r1"
				}
				var (
					run     func(tx *ent.Tx) error
					targets []string
				)
				switch rng.IntN(4) {
				case 0: // one topology
					run = func(tx *ent.Tx) error {
						return tx.DeploymentTopology.Update().
							Where(deploymenttopology.DeploymentID(dep), deploymenttopology.Region(region)).
							AddReplicas(1).Exec(ctx)
					}
					targets = []string{topo(dep, region)}
				case 1: // all regions of a deployment, in bulk
					run = func(tx *ent.Tx) error {
						return tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(dep)).
							SetReplicas(rng.IntN(10)).Exec(ctx)
					}
					for _, r := range regions {
						targets = append(targets, topo(dep, r))
					}
				case 2: // a new spec for every region of a deployment
					run = func(tx *ent.Tx) error {
						return tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(dep)).
							SetImage(fmt.Sprintf("app:%d", rng.IntN(100))).Exec(ctx)
					}
					for _, r := range regions {
						targets = append(targets, topo(dep, r))
					}
				case 3: // a sentinel
					i := rng.IntN(len(regions))
					id := fmt.Sprintf("s%d", i+1)
					run = func(tx *ent.Tx) error { return tx.Sentinel.UpdateOneID(id).AddReplicas(1).Exec(ctx) }
					targets = []string{sent(id, regions[i])}
				}
				rollback := rng.IntN(8) == 0
				tx, err := client.Tx(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := run(tx); err != nil {
					// Deadlock victims and lock timeouts: the transaction
					// is gone, and so must be its change rows.
					tx.Rollback()
					mu.Lock()
					failures++
					mu.Unlock()
					continue
				}
				if rollback {
					tx.Rollback()
					mu.Lock()
					rollbacks++
					mu.Unlock()
					continue
				}
				if err := tx.Commit(); err != nil {
					mu.Lock()
					failures++
					mu.Unlock()
					continue
				}
				mu.Lock()
				commits++
				for _, k := range targets {
					committed[k]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d commits, %d rollbacks, %d failed (deadlocks/timeouts)", commits, rollbacks, failures)
	if commits < writers*iterations/2 {
		t.Fatalf("only %d of %d mutations committed; the test proves little", commits, writers*iterations)
	}

	rows, err := client.DeploymentChange.Query().Where(deploymentchange.IDGT(mark)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range rows {
		got[fmt.Sprintf("%s/%s/%s", r.ResourceType, r.ResourceID, r.Region)]++
	}
	for k, n := range committed {
		if got[k] != n {
			t.Errorf("%s: %d change rows, %d committed mutations", k, got[k], n)
		}
	}
	for k, n := range got {
		if committed[k] == 0 {
			t.Errorf("%s: %d change rows but no committed mutation", k, n)
		}
	}
}
