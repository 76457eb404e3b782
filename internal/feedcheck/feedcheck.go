package feedcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/wantstate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Config sizes a run.
type Config struct {
	// Seed draws every worker's operations; the same seed, the same
	// operations.
	Seed uint64
	// Transactions is how many transactions (and desired-state calls) the
	// workers run in all (default 300).
	Transactions int
	// Workers run transactions concurrently (default 8).
	Workers int
	// Regions the workload writes to, each with its own follower (default
	// eu and us).
	Regions []string
	// MaxHold is the longest a slow transaction stays open before it
	// commits or rolls back (default 40ms): long enough for a follower to
	// read what another transaction committed meanwhile.
	MaxHold time.Duration
	// Settle bounds how long the followers get to catch up once the
	// workers are done (default 15s).
	Settle time.Duration
}

func (c *Config) defaults() {
	if c.Transactions == 0 {
		c.Transactions = 300
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if len(c.Regions) == 0 {
		c.Regions = []string{"eu", "us"}
	}
	if c.MaxHold == 0 {
		c.MaxHold = 40 * time.Millisecond
	}
	if c.Settle == 0 {
		c.Settle = 15 * time.Second
	}
}

// System is what the checker runs against.
type System struct {
	// DB holds the desired state (a migrated database; the change-feed
	// hooks registered).
	DB *store.DB
	// Writers, when set, are what the workers write through instead of
	// DB, worker w through Writers[w%len(Writers)]: the nodes of a
	// multi-primary cluster, each behind its own ctrld replica.
	Writers []*store.DB
	// During, when set, runs beside the workers (a fault schedule: a
	// database node or a ctrld replica lost); the check starts once both
	// it and the workers are done.
	During func(ctx context.Context)
	// Watch returns a cluster-service client allowed to watch region.
	Watch func(region string) ctrlv1.ClusterServiceClient
}

// Report is what a run did and found.
type Report struct {
	Seed                  uint64
	Committed, RolledBack int
	// Error counts operations the database or the desired-state layer
	// refused (a duplicate, a missing row or parent, an invalid owner),
	// Conflicts those still colliding with others (deadlocks,
	// certification conflicts, lock wait timeouts) after store.WithTx's
	// reruns.
	Error, Conflicts int
	// FirstError is the first refusal's text, to tell expected refusals
	// (a duplicate, a missing row) from a sick database.
	FirstError error
	// Ops counts committed operations by name.
	Ops map[string]int
	// StaleFences counts the rollout actions fenced with what no rollout
	// can match any more that the desired-state layer refused, as it
	// must (one that acted is a violation).
	StaleFences int
	// Followers is how many followers were checked, Reconnects how often
	// the live ones were cut and resumed.
	Followers, Reconnects int
	// Violations are the differences between a follower's view and the
	// database, and the store calls that broke a rule the workload
	// knows (a stale fence that acted), one line each; empty when the
	// feed held.
	Violations []string
}

// Summary is the report in one line.
func (r Report) Summary() string {
	names := slices.Sorted(maps.Keys(r.Ops))
	ops := make([]string, 0, len(names))
	for _, n := range names {
		ops = append(ops, fmt.Sprintf("%s=%d", n, r.Ops[n]))
	}
	return fmt.Sprintf("seed %d: %d committed, %d rolled back, %d refused (%d stale fences), %d conflicted; %d followers, %d reconnects; %d violations; ops: %s",
		r.Seed, r.Committed, r.RolledBack, r.Error, r.StaleFences, r.Conflicts, r.Followers, r.Reconnects, len(r.Violations), strings.Join(ops, " "))
}

// Run runs the workload against sys while followers watch every region,
// then checks the followers' views against the database. An error means
// the run could not be carried out (not that the feed broke: that is
// Report.Violations).
func Run(ctx context.Context, sys System, cfg Config) (Report, error) {
	cfg.defaults()
	rep := Report{Seed: cfg.Seed, Ops: map[string]int{}}
	for _, r := range cfg.Regions {
		if err := desired.RegisterRegion(ctx, sys.DB.Ent, r); err != nil {
			return rep, err
		}
	}

	var followers sync.WaitGroup
	defer followers.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	follow := func(f *streamtest.Follower) {
		followers.Go(func() { f.Run(ctx) })
	}

	// The live followers, from cursor 0, cut at random (in the middle of
	// a full sync's batches too) and resumed from their bookmarks;
	// snapshots of them are saved now and then to start more followers
	// from later. They take batches, as agentd does.
	live := map[string]*streamtest.Follower{}
	for _, region := range cfg.Regions {
		live[region] = streamtest.New(sys.Watch(region), region, "feedcheck-live-"+region).WithBatches()
		follow(live[region])
	}
	var (
		saved   []savedView
		savedMu sync.Mutex
	)
	disrupt := rand.New(rand.NewPCG(cfg.Seed, 1<<32))
	stopDisrupt := make(chan struct{})
	disrupted := make(chan struct{})
	go func() {
		defer close(disrupted)
		for {
			select {
			case <-stopDisrupt:
				return
			case <-time.After(time.Duration(20+disrupt.IntN(200)) * time.Millisecond):
			}
			region := draw(disrupt, cfg.Regions)
			if disrupt.IntN(2) == 0 {
				live[region].Disconnect()
				continue
			}
			if s := live[region].Snapshot(); s.Cursor > 0 {
				savedMu.Lock()
				saved = append(saved, savedView{region, s})
				savedMu.Unlock()
			}
		}
	}()

	var (
		workers sync.WaitGroup
		mu      sync.Mutex
	)
	if sys.During != nil {
		workers.Go(func() { sys.During(ctx) })
	}
	perWorker := cfg.Transactions / cfg.Workers
	for w := range cfg.Workers {
		workers.Go(func() {
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			db := sys.DB
			if len(sys.Writers) > 0 {
				db = sys.Writers[w%len(sys.Writers)]
			}
			s := desired.New(db.Ent)
			for range perWorker {
				names, outcome, err := runOne(ctx, db.Ent, s, r, cfg)
				mu.Lock()
				if v := (*violation)(nil); errors.As(err, &v) {
					rep.Violations = append(rep.Violations, v.what)
				}
				if v := (*staleRefused)(nil); errors.As(err, &v) {
					rep.StaleFences++
				}
				if err != nil && rep.FirstError == nil {
					rep.FirstError = err
				}
				switch outcome {
				case committed:
					rep.Committed++
					for _, n := range names {
						rep.Ops[n]++
					}
				case rolledBack:
					rep.RolledBack++
				case conflicted:
					rep.Conflicts++
				default:
					rep.Error++
				}
				mu.Unlock()
			}
		})
	}
	workers.Wait()
	close(stopDisrupt)
	<-disrupted
	if err := ctx.Err(); err != nil {
		return rep, err
	}

	regions, err := wantstate.Read(ctx, sys.DB.Ent)
	if err != nil {
		return rep, err
	}
	want := map[string]map[streamtest.Key]string{}
	for _, region := range cfg.Regions {
		want[region] = desiredView(regions[region])
	}

	// Followers from saved bookmarks (a few, spread over the run) and two
	// fresh ones from cursor 0 per region, one that takes batches and one
	// that does not (an agent older than them), next to the live ones.
	type checked struct {
		name string
		f    *streamtest.Follower
	}
	var all []checked
	for _, region := range cfg.Regions {
		all = append(all, checked{"live follower of " + region, live[region]})
		fresh := streamtest.New(sys.Watch(region), region, "feedcheck-fresh-"+region).WithBatches()
		follow(fresh)
		all = append(all, checked{"new follower of " + region + " from cursor 0", fresh})
		old := streamtest.New(sys.Watch(region), region, "feedcheck-fresh-single-"+region)
		follow(old)
		all = append(all, checked{"new follower of " + region + " from cursor 0, without batches", old})
	}
	for i, sv := range spread(saved, 4) {
		f := streamtest.Resume(sys.Watch(sv.region), sv.region, fmt.Sprintf("feedcheck-resumed-%d", i), sv.snap)
		follow(f)
		all = append(all, checked{fmt.Sprintf("follower of %s resumed from bookmark %d", sv.region, sv.snap.Cursor), f})
	}
	rep.Followers = len(all)
	for _, c := range all {
		region := c.f.Region()
		s, ok := c.f.WaitFor(cfg.Settle, func(s streamtest.Snapshot) bool { return len(diff(want[region], s.View)) == 0 })
		if c.f == live[region] {
			rep.Reconnects += s.Reconnects
		}
		if !ok {
			for _, d := range diff(want[region], s.View) {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s (cursor %d, last error %v): %s", c.name, s.Cursor, s.LastErr, d))
			}
		}
	}
	return rep, nil
}

type savedView struct {
	region string
	snap   streamtest.Snapshot
}

// spread picks at most n of s, evenly spaced.
func spread[T any](s []T, n int) []T {
	if len(s) <= n {
		return s
	}
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, s[i*len(s)/n])
	}
	return out
}

type outcome int

const (
	committed outcome = iota
	rolledBack
	conflicted
	failed
)

// errRollback makes WithTx roll a transaction back on purpose.
var errRollback = errors.New("feedcheck: rolled back on purpose")

// runOne runs one random transaction of one to three statements, or one
// desired-state call, and returns the names of its operations, or why it
// failed.
func runOne(ctx context.Context, client *ent.Client, s *desired.Store, r *rand.Rand, cfg Config) ([]string, outcome, error) {
	if r.IntN(3) == 0 {
		op := draw(r, storeOps)
		if err := op.run(ctx, s, client, r, cfg.Regions); err != nil {
			return nil, failedWith(err), err
		}
		return []string{op.name}, committed, nil
	}
	var ops []txOp
	for range 1 + r.IntN(3) {
		ops = append(ops, draw(r, txOps))
	}
	hold := time.Duration(0)
	if r.IntN(3) == 0 {
		hold = time.Duration(r.Int64N(int64(cfg.MaxHold)))
	}
	rollback := r.IntN(10) == 0
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		for i, op := range ops {
			if err := op.run(ctx, tx, r, cfg.Regions); err != nil {
				return err
			}
			if i == 0 && hold > 0 {
				// Hold the first statement's locks while others run.
				time.Sleep(hold / 2)
			}
		}
		time.Sleep(hold / 2)
		if rollback {
			return errRollback
		}
		return nil
	})
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		names = append(names, op.name)
	}
	switch {
	case err == nil:
		return names, committed, nil
	case errors.Is(err, errRollback):
		return nil, rolledBack, nil
	default:
		return nil, failedWith(err), err
	}
}

func failedWith(err error) outcome {
	if store.IsConflict(err) {
		return conflicted
	}
	return failed
}
