package stream_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream/seed"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// gapScenario is the workload that breaks the seed algorithm: many writers
// whose transactions take their change row's pk, stay open a random
// 0-50 ms, and commit (or roll back, ~10 %) out of pk order, while the
// agent reconnects at random moments. Periodic resync is off: nothing but
// the stream can deliver a change.
type gapScenario struct {
	writers      int
	opsPerWriter int
	deployments  int
	region       string
}

type gapResult struct {
	committed, rolledBack, failed int
	missed                        []string // deployments whose final state the agent never saw
}

func (g gapScenario) run(t *testing.T, db *store.DB, client ctrlv1.ClusterServiceClient, settle time.Duration) gapResult {
	t.Helper()
	ctx := context.Background()
	ds := desired.New(db.Ent)
	ids := make([]string, g.deployments)
	for i := range ids {
		ids[i] = fmt.Sprintf("dep-%d", i)
		if err := ds.Deploy(ctx, deploySpec(ids[i]), []string{g.region}, 0); err != nil {
			t.Fatal(err)
		}
	}

	f := streamtest.New(client, g.region, "agent-0")
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		if err := f.Run(runCtx); err != nil {
			t.Errorf("follower: %v", err)
		}
	}()
	// Start from a synced agent: a full sync that keeps being interrupted
	// would re-read all state and hide what the incremental stream loses.
	if _, ok := f.WaitFor(30*time.Second, func(s streamtest.Snapshot) bool { return s.FullSyncs == 1 }); !ok {
		t.Fatal("initial full sync did not finish")
	}
	go func() { // reconnect at random moments
		defer bg.Done()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
				f.Disconnect()
			}
		}
	}()

	var (
		mu    sync.Mutex
		final = map[string]int{} // deployment -> replicas after its last committed change
		res   gapResult
	)
	var wg sync.WaitGroup
	for w := range g.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for range g.opsPerWriter {
				// Think time keeps the write rate within what even the
				// seed algorithm can read, so it works at the frontier
				// where commits arrive out of order, not behind it.
				time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				id := ids[rng.IntN(len(ids))]
				tx, err := db.Ent.Tx(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				err = tx.DeploymentTopology.Update().
					Where(deploymenttopology.DeploymentID(id), deploymenttopology.Region(g.region)).
					AddReplicas(1).Exec(ctx)
				var replicas int
				if err == nil {
					// Hold the transaction (and its change row's pk) open.
					time.Sleep(time.Duration(rng.IntN(51)) * time.Millisecond)
					var top *ent.DeploymentTopology
					top, err = tx.DeploymentTopology.Query().
						Where(deploymenttopology.DeploymentID(id), deploymenttopology.Region(g.region)).Only(ctx)
					if err == nil {
						replicas = top.Replicas
					}
				}
				switch {
				case err != nil:
					tx.Rollback()
					mu.Lock()
					res.failed++
					mu.Unlock()
				case rng.IntN(10) == 0:
					tx.Rollback()
					mu.Lock()
					res.rolledBack++
					mu.Unlock()
				default:
					if err := tx.Commit(); err != nil {
						mu.Lock()
						res.failed++
						mu.Unlock()
						continue
					}
					mu.Lock()
					res.committed++
					final[id] = max(final[id], replicas)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	matches := func(s streamtest.Snapshot) []string {
		var missed []string
		for id, want := range final {
			if got := replicasOf(s, id); got != int32(want) {
				missed = append(missed, fmt.Sprintf("%s: agent has %d replicas, committed %d", id, got, want))
			}
		}
		return missed
	}
	s, _ := f.WaitFor(settle, func(s streamtest.Snapshot) bool { return len(matches(s)) == 0 })
	stop()
	bg.Wait()
	res.missed = matches(s)
	t.Logf("%d committed, %d rolled back, %d failed; %d reconnects, %d events; %d of %d deployments missed their last change",
		res.committed, res.rolledBack, res.failed, s.Reconnects, s.Received, len(res.missed), len(final))
	return res
}

var defaultGap = gapScenario{writers: 16, opsPerWriter: 40, deployments: 600, region: "eu"}

// Invariant I2: with 16 writers committing out of pk order, rollbacks and
// random reconnects, the agent ends up with every committed change.
func TestGapSafeStreamMissesNothing(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	res := defaultGap.run(t, env.DB, env.Agent("eu"), 30*time.Second)
	if res.committed < defaultGap.writers*defaultGap.opsPerWriter/2 {
		t.Fatalf("only %d changes committed; the scenario proves little", res.committed)
	}
	if len(res.missed) > 0 {
		t.Fatalf("the stream lost %d changes:\n%v", len(res.missed), res.missed)
	}
}

// The same scenario against the seed algorithm loses changes: this is the
// test above failing where it should. Whether a given run loses any depends
// on how commits and polls interleave (usually 15-20 % of the deployments,
// now and then almost none), so the control gets up to three runs, each on
// a fresh database, to show one loss.
func TestSeedAlgorithmMissesChanges(t *testing.T) {
	const attempts = 3
	for attempt := 1; attempt <= attempts; attempt++ {
		env := servertest.Start(t, server.Config{})
		token := env.AgentToken("eu")
		// The same algorithm, polling every 20-60 ms instead of 0.5-1.5 s:
		// the workload lasts about two seconds, and at the design's pace it
		// would span only two or three polls, each a chance to skip an
		// open pk.
		addr := servertest.ServeWatcher(t, env.DB, &seed.Watcher{DB: env.DB.SQL, Client: env.DB.Ent,
			MinPoll: 20 * time.Millisecond, MaxPoll: 60 * time.Millisecond})
		client := ctrlv1.NewClusterServiceClient(servertest.Dial(t, addr, token))
		if res := defaultGap.run(t, env.DB, client, 5*time.Second); len(res.missed) > 0 {
			return
		}
	}
	t.Fatalf("the seed algorithm missed nothing in %d runs; the gap scenario is too gentle to prove anything", attempts)
}
