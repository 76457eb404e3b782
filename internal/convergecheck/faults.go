package convergecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Fault kinds.
const (
	// FaultCtrldRestart stops ctrld and starts it again on the same
	// address: every stream on it ends, every agent on it reconnects.
	FaultCtrldRestart = "ctrld-restart"
	// FaultReplica moves a region's agent to a second ctrld replica on the
	// same database for a while, then back, stopping the replica.
	FaultReplica = "ctrld-replica"
	// FaultAgentKill stops a region's agent for a while and starts a new one
	// with the same identity, from scratch (a full sync).
	FaultAgentKill = "agent-kill"
	// FaultStreamCut breaks a region's open stream; the agent resumes from
	// its last bookmark.
	FaultStreamCut = "stream-cut"
	// FaultPause pauses a region for a while (operator API), then resumes it.
	FaultPause = "region-pause"
	// FaultResync forces a region's full sync (operator API).
	FaultResync = "force-resync"
	// FaultRetention stops a region's agent, then deletes every change row
	// up to the safe watermark (retention with a TTL of ~0 and no agent
	// holding rows) and starts the agent again: its cursor now lies below
	// the retained rows, so it must be told resync_required.
	FaultRetention = "retention"
	// FaultAPIServer kills a region's kube-apiserver and starts it again on
	// the same etcd.
	FaultAPIServer = "apiserver-restart"
	// FaultMariaDB kills the checker's own MariaDB server and starts it
	// again (only with Setup.MariaDB).
	FaultMariaDB = "mariadb-restart"
	// FaultPrometheus kills a region's Prometheus for promOutageMin to
	// promOutageMax and starts it again on its data: the region's checks
	// have no verdict meanwhile, which may pass no wave.
	FaultPrometheus = "prometheus-outage"
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultCtrldRestart, FaultReplica, FaultAgentKill, FaultStreamCut, FaultPause,
	FaultResync, FaultRetention, FaultAPIServer, FaultMariaDB, FaultPrometheus}

// A Prometheus outage lasts long enough to cover a canary's check from
// before its last evaluation until its wave would pass (the checks
// verdict needs the Prometheus down from one SyncChecks call and a second
// before the pass), and mostly shorter than its deadline and bake (16 s),
// so that some canaries pass once it is back and some fail for want of a
// verdict.
const (
	promOutageMin = 4 * time.Second
	promOutageMax = 16 * time.Second
)

// step is one action of a round's fault schedule, at a time from the
// round's start. A fault that lasts has two steps: its start (which names
// the fault) and its end.
type step struct {
	at    time.Duration
	fault string // the fault a start step injects; "" for an end step
	what  string // for logs and the failure report
	do    func(ctx context.Context) (injected bool, err error)
}

// schedule draws n faults of the given kinds within length, the first
// ones each of the kinds in each. Faults may overlap; a step that finds its
// fault already in place (an agent already killed, say) does nothing and
// is not counted.
func (s *System) schedule(rng *rand.Rand, kinds, each []string, n int, length time.Duration) []step {
	var steps []step
	for i := range max(n, len(each)) {
		kind := pick(rng, kinds)
		if i < len(each) {
			kind = each[i]
		}
		at := time.Duration(rng.Int64N(int64(length)))
		hold := 300*time.Millisecond + time.Duration(rng.Int64N(int64(3*time.Second)))
		r := s.regions[pick(rng, Regions)]
		start := func(what string, do func(ctx context.Context) (bool, error)) {
			steps = append(steps, step{at: at, fault: kind, what: what, do: do})
		}
		end := func(what string, do func(ctx context.Context) (bool, error)) {
			steps = append(steps, step{at: at + hold, what: what, do: do})
		}
		switch kind {
		case FaultCtrldRestart:
			start("restart ctrld", func(context.Context) (bool, error) { s.env.Restart(); return true, nil })
		case FaultReplica:
			node := 0 // with Galera, the replica's node: another than the main ctrld's
			if s.galera != nil {
				node = 1 + rng.IntN(len(s.galera.Nodes)-1)
			}
			start("move agent "+r.name+" to a new ctrld replica", func(context.Context) (bool, error) { return s.toReplica(r, node), nil })
			end("move agent "+r.name+" back, stop the replica", func(context.Context) (bool, error) { return s.fromReplica(r), nil })
		case FaultAgentKill:
			start("kill agent "+r.name, func(context.Context) (bool, error) { return r.stopAgent(), nil })
			end("start agent "+r.name, func(context.Context) (bool, error) { return r.startAgent(), nil })
		case FaultStreamCut:
			start("cut agent "+r.name+"'s stream", func(context.Context) (bool, error) { r.link.cut(); return true, nil })
		case FaultPause:
			start("pause "+r.name, func(ctx context.Context) (bool, error) { return true, s.setPaused(ctx, r.name, true) })
			end("resume "+r.name, func(ctx context.Context) (bool, error) { return false, s.setPaused(ctx, r.name, false) })
		case FaultResync:
			start("force resync of "+r.name, func(ctx context.Context) (bool, error) { return true, s.forceResync(ctx, r.name) })
		case FaultRetention:
			start("kill agent "+r.name+" for retention", func(context.Context) (bool, error) { return r.stopAgent(), nil })
			end("delete change rows, start agent "+r.name, func(ctx context.Context) (bool, error) {
				err := s.cleanChanges(ctx)
				r.startAgent()
				return false, err
			})
		case FaultAPIServer:
			what := "restart " + r.name + "'s kube-apiserver"
			start(what, func(context.Context) (bool, error) {
				return s.background(&r.restarting, what, r.cluster.RestartAPIServer), nil
			})
		case FaultPrometheus:
			down := promOutageMin + time.Duration(rng.Int64N(int64(promOutageMax-promOutageMin)))
			what := fmt.Sprintf("stop %s's Prometheus for %s", r.name, down.Round(time.Millisecond))
			start(what, func(context.Context) (bool, error) {
				return s.background(&r.metrics.restarting, what, func(ctx context.Context) error {
					return r.metrics.outage(ctx, down)
				}), nil
			})
		case FaultMariaDB:
			down := hold / 3
			server, what := s.mariadb, fmt.Sprintf("restart MariaDB (down %s)", down.Round(time.Millisecond))
			ctrldsOwn := true // the main ctrld's database
			if s.galera != nil {
				node := rng.IntN(len(s.galera.Nodes))
				server, what = s.galera.Nodes[node], fmt.Sprintf("restart Galera node %d (down %s)", node+1, down.Round(time.Millisecond))
				ctrldsOwn = node == 0
			}
			start(what, func(context.Context) (bool, error) {
				return s.background(&s.mariadbRestarting, what, func(ctx context.Context) error {
					if ctrldsOwn {
						s.dbOutage.begin()
						defer s.dbOutage.end()
					}
					return server.Restart(ctx, down)
				}), nil
			})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	return steps
}

// runSchedule runs the steps at their times from start (at once when
// behind: a restart can take seconds) and counts the faults injected. It
// returns, whatever the way (a failed step, ctx, a step ending the test),
// only once the slow restarts it began are over: one that outlived its
// round would meet the next round's faults, or a stopped system.
func (s *System) runSchedule(ctx context.Context, start time.Time, steps []step, faults map[string]int) (err error) {
	defer func() { err = errors.Join(err, s.waitSlow()) }()
	for _, st := range steps {
		if wait := time.Until(start.Add(st.at)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		began := time.Since(start)
		injected, err := st.do(ctx)
		if err != nil {
			return fmt.Errorf("fault step %q: %w", st.what, err)
		}
		if st.fault != "" && injected {
			faults[st.fault]++
		}
		note := ""
		if st.fault != "" && !injected {
			note = " (already in place, skipped)"
		}
		s.logf("  %6.2fs %s%s (took %s)", began.Seconds(), st.what, note, (time.Since(start) - began).Round(time.Millisecond))
	}
	return nil
}

// waitSlow waits for the slow restarts under way and returns their errors.
func (s *System) waitSlow() error {
	s.slow.Wait()
	s.slowMu.Lock()
	defer s.slowMu.Unlock()
	err := s.slowErr
	s.slowErr = nil
	return err
}

// background runs a slow restart (seconds) beside the rest of the
// schedule, so that other faults and the operators meet the component
// while it is down. busy keeps one restart of a component at a time; it
// reports false when one is already under way. The restart's context ends
// with the system (Start's cleanup), not with the step.
func (s *System) background(busy *atomic.Bool, what string, restart func(context.Context) error) bool {
	if !busy.CompareAndSwap(false, true) {
		return false
	}
	began := time.Now()
	s.slow.Go(func() {
		defer busy.Store(false)
		err := restart(s.slowCtx)
		s.slowMu.Lock()
		defer s.slowMu.Unlock()
		if err != nil {
			s.slowErr = errors.Join(s.slowErr, fmt.Errorf("fault %q: %w", what, err))
		}
		s.logf("  %s: done after %s", what, time.Since(began).Round(time.Millisecond))
	})
	return true
}

// toReplica starts a second ctrld on the same database (with Galera,
// through node) and moves the region's agent to it.
func (s *System) toReplica(r *region, node int) bool {
	if r.replica != nil {
		return false
	}
	if s.galera == nil {
		r.replica = s.env.StartReplica()
	} else {
		// On another node, through its own pools: what it reads and
		// writes goes through that node.
		db, err := s.galeraNodeDB(node)
		if err != nil { // the node is being restarted, say: no move this time
			s.logf("  convergecheck: no replica on Galera node %d: %v", node+1, err)
			return false
		}
		r.replica, r.replicaDB = s.env.StartReplicaOn(db), db
	}
	r.replicaConn = servertest.Dial(s.t, r.replica.Addr, r.token)
	r.link.moveTo(ctrlv1.NewClusterServiceClient(r.replicaConn))
	return true
}

// fromReplica moves the agent back to the main ctrld and stops the replica.
func (s *System) fromReplica(r *region) bool {
	if r.replica == nil {
		return false
	}
	r.link.moveTo(r.primary)
	r.replicaConn.Close()
	r.replica.Stop()
	if r.replicaDB != nil {
		r.replicaDB.Close()
	}
	r.replica, r.replicaDB, r.replicaConn = nil, nil, nil
	return true
}

// galeraNodeDB opens ctrld's database through Galera node i (0-based).
func (s *System) galeraNodeDB(i int) (*store.DB, error) {
	cfg, err := mysql.ParseDSN(s.galera.Nodes[i].DSN)
	if err != nil {
		return nil, err
	}
	cfg.DBName = s.database
	return store.Open(context.Background(), cfg.FormatDSN())
}

// retryControl retries a control call through ctrld or database restarts:
// a region left paused would never converge.
func retryControl(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := call(callCtx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *System) setPaused(ctx context.Context, region string, paused bool) error {
	return retryControl(ctx, func(ctx context.Context) error {
		_, err := s.control.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: region, Paused: paused})
		return err
	})
}

func (s *System) forceResync(ctx context.Context, region string) error {
	return retryControl(ctx, func(ctx context.Context) error {
		_, err := s.control.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: region, Reason: "convergecheck"})
		return err
	})
}

// cleanChanges runs retention once with a TTL of ~0 and no agent holding
// rows: every change row up to the safe watermark goes.
func (s *System) cleanChanges(ctx context.Context) error {
	c := retention.New(s.env.DB.SQL, retention.Config{TTL: time.Nanosecond, MaxAge: time.Nanosecond, AgentWindow: time.Nanosecond},
		servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	return retryControl(ctx, func(ctx context.Context) error {
		n, err := c.RunOnce(ctx)
		s.retentionRows += n
		return err
	})
}
