package convergecheck

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// DefaultConvergeWithin bounds the wait for convergence after a round. With
// periodic resync off, what repairs a cluster is the stream (changes within
// milliseconds of their commit, or the 100 ms hole grace of the test
// ctrld), reconnects (agent backoff at most 500 ms here) and full syncs
// (seconds for this pool of resources); on this 2-core machine a round
// converges in a few seconds. 60 s leaves an order of magnitude of room for
// a loaded machine, and anything longer is a resource that never arrives.
const DefaultConvergeWithin = 60 * time.Second

// Config sizes a run.
type Config struct {
	// Seed draws everything random; the same seed replays the same
	// operations and faults.
	Seed uint64
	// Rounds to run (default 3), unless Duration is set.
	Rounds int
	// Duration, when set, runs rounds until it has passed.
	Duration time.Duration
	// RoundLength is how long operators run in a round (default 8s).
	RoundLength time.Duration
	// ConvergeWithin bounds the wait for convergence (default
	// DefaultConvergeWithin).
	ConvergeWithin time.Duration
	// Faults are the kinds drawn from: nil means all that the setup can
	// inject, empty means none.
	Faults []string
	// Each is a fault kind every round's schedule injects at least once,
	// besides those drawn (e.g. the Galera node restart and the replica on
	// another node, for a Galera run that must not pass without them).
	Each []string
}

// Report is what a run did.
type Report struct {
	Seed   uint64
	Rounds int
	// Ops counts operator calls by operation and outcome.
	Ops map[string]OpStats
	// Faults counts injected faults by kind.
	Faults map[string]int
	// Converge is each round's time from the end of its operations and
	// faults until every region matched desired state.
	Converge []time.Duration
	// Desired is each round's number of desired objects (all regions) at
	// its verdict: a run whose desired state stayed empty compared nothing.
	Desired []int
	// RetentionRows counts the change rows the retention fault deleted.
	RetentionRows int64
	// Rollouts counts the rollouts that ended, and what the rollout
	// verdict found.
	Rollouts RolloutStats
	// Fences counts the operators' fenced actions on rollouts by
	// outcome, and what the checker verified of the refused ones;
	// Strategies the strategies ctrld must refuse.
	Fences     FenceStats
	Strategies StrategyStats
	// Fleet counts what the fleet operator did with the fleet's controls
	// and what the fleet verdicts found.
	Fleet FleetStats
	// verdict is what the rollout verdict keeps between its looks.
	verdict verdictState
}

// Median is the median time to converge.
func (r Report) Median() time.Duration {
	if len(r.Converge) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(r.Converge))
	return s[len(s)/2]
}

// Max is the longest time to converge.
func (r Report) Max() time.Duration {
	if len(r.Converge) == 0 {
		return 0
	}
	return slices.Max(r.Converge)
}

// String is the report for a test log.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d rounds; converged in median %s, max %s\n", r.Seed, r.Rounds,
		r.Median().Round(time.Millisecond), r.Max().Round(time.Millisecond))
	b.WriteString("operations (ok/rejected/failed):")
	total, inOutage := 0, 0
	for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
		s := r.Ops[op]
		total += s.OK + s.Rejected + s.Failed
		inOutage += s.InOutage
		fmt.Fprintf(&b, " %s %d/%d/%d", op, s.OK, s.Rejected, s.Failed)
	}
	fmt.Fprintf(&b, " (%d calls; %d failed while a fault had ctrld's database down)\nfaults:", total, inOutage)
	for _, f := range slices.Sorted(maps.Keys(r.Faults)) {
		fmt.Fprintf(&b, " %s %d", f, r.Faults[f])
	}
	fmt.Fprintf(&b, " (retention deleted %d change rows)\ndesired objects at the verdicts: %v", r.RetentionRows, r.Desired)
	ro := r.Rollouts
	fmt.Fprintf(&b, "\nrollouts: %d ended (%d succeeded, %d rolled back: %d on a failed wave, %d aborted; %d to a failing image); %d settled after a round",
		ro.Succeeded+ro.RolledBack, ro.Succeeded, ro.RolledBack, ro.Halted, ro.Aborted, ro.Bad, ro.Settled)
	fmt.Fprintf(&b, "\nthe promise: %d rollouts held to it (%d not: their new spec unreadable), %d later regions given the spec after an earlier wave ran it ready for its bake",
		ro.Judged, ro.Unjudged, ro.Passes)
	if ro.Passes > 0 {
		fmt.Fprintf(&b, " (by at least %s)", ro.Tightest.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, ", %d given it against the promise (image watches lost %d times)", ro.Broken, ro.WatchGaps)
	fmt.Fprintf(&b, "\nmetric gates: %d rollouts under the error-rate check ended (%d of %s), %d halted on a check (%d for want of a verdict within the deadline);"+
		" %d passes of a checked wave held to its Prometheus' outages (%d with the Prometheus down between the promotion and the pass",
		ro.Checked, ro.Errors, ErrorsImage, ro.OnMetrics, ro.NoVerdict, ro.CheckPasses, ro.AfterOutage)
	if ro.SoonestAfterOutage > 0 {
		fmt.Fprintf(&b, ", the soonest %s after it started again", ro.SoonestAfterOutage.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "; %d not judged), %d bad revisions past their first wave", ro.CheckUnjudged, ro.BadPast)
	f := r.Fences
	fmt.Fprintf(&b, "\nfenced actions: as read %d acted, %d refused as moved meanwhile, %d refused as not possible now; %d stale ones refused;"+
		" of the refused, %d read back unchanged, %d moved meanwhile with no trace of the action, %d not read back",
		f.Acted, f.Moved, f.NotNow, f.Stale, f.Unchanged, f.MovedMeanwhile, f.Unread)
	st := r.Strategies
	fmt.Fprintf(&b, "\nstrategies: %d naming an unregistered region refused as invalid, %d updates refused for a wave naming none of the deployment's regions;"+
		" %d refused updates found to have written nothing (%d not looked for); %d rollouts' plans kept their named first wave",
		st.Typos, st.NoRegion, st.WroteNothing, st.Unread, ro.Plans)
	fl := r.Fleet
	fmt.Fprintf(&b, "\nfleet: %d halts (%d checked to have paused their scope), %d resumes; %d one-off freeze windows and %d recurring set, %d deleted;"+
		" %d pacing bounds set, %d removed; %d rollouts queued, %d break-glasses; %d retries of a failed spec with a reason, %d without refused;"+
		" %d wave starts held to the halts and windows standing then, %d first waves to the bounds, %d immediate changes to the halts and windows; %d violations",
		fl.Halts, fl.HaltChecks, fl.Resumes, fl.Windows, fl.Recurring, fl.WindowDeletes, fl.Bounds, fl.BoundRemoves, fl.Queued, fl.BreakGlasses,
		fl.Retries, fl.RetriesRefused, fl.Starts, fl.Paced, fl.Immediate, fl.Violations)
	return b.String()
}

// minOKShare is the least share of operator calls that must change desired
// state. The pools make many calls that are refused on purpose, and faults
// fail some; a run that changed almost nothing proves little. Calls made
// while a fault had ctrld's database down do not count: a Galera node
// takes ctrld's for longer than a round has left (it rejoins in 5-10 s).
const minOKShare = 5

// ProvesLittle names what makes a run that converged prove little: no
// fault injected (when faults were on) in some round, few operations that
// changed desired state, or an empty desired state at every verdict.
func (r Report) ProvesLittle(faultsOn bool) []string {
	var weak []string
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	if faultsOn && faults < r.Rounds {
		weak = append(weak, fmt.Sprintf("%d faults injected in %d rounds (every round's first fault finds nothing in place)", faults, r.Rounds))
	}
	ok, calls, inOutage := 0, 0, 0
	for _, s := range r.Ops {
		ok += s.OK
		calls += s.OK + s.Rejected + s.Failed - s.InOutage
		inOutage += s.InOutage
	}
	if ok == 0 || ok < calls/minOKShare {
		weak = append(weak, fmt.Sprintf("only %d of %d operator calls changed desired state (want at least 1 in %d; not counting the %d made while ctrld's database was down)", ok, calls, minOKShare, inOutage))
	}
	if len(r.Desired) == 0 || slices.Max(r.Desired) == 0 {
		weak = append(weak, "desired state was empty at every verdict: nothing was compared")
	}
	if r.Rollouts.Succeeded+r.Rollouts.RolledBack == 0 {
		weak = append(weak, "no rollout ended: the rollout verdict checked nothing")
	}
	if r.Fleet.Halts == 0 || r.Fleet.Windows == 0 || r.Fleet.Starts == 0 {
		weak = append(weak, fmt.Sprintf("%d halts, %d freeze windows, %d wave starts judged: the fleet verdicts checked little", r.Fleet.Halts, r.Fleet.Windows, r.Fleet.Starts))
	}
	return weak
}

// DivergenceError is a round that did not converge in time.
type DivergenceError struct {
	Seed   uint64
	Round  int
	Within time.Duration
	// Problems lists, per region, what is missing, extra or wrong, and any
	// agent that is not connected or not caught up.
	Problems []string
	// Schedule is the round's fault schedule, for the diagnosis.
	Schedule []string
}

func (e *DivergenceError) Error() string {
	return fmt.Sprintf("round %d (seed %d) did not converge within %s:\n  %s\nfault schedule of the round:\n  %s",
		e.Round, e.Seed, e.Within, strings.Join(e.Problems, "\n  "), strings.Join(e.Schedule, "\n  "))
}

func (c *Config) defaults() {
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.RoundLength <= 0 {
		c.RoundLength = 8 * time.Second
	}
	if c.ConvergeWithin <= 0 {
		c.ConvergeWithin = DefaultConvergeWithin
	}
}

// Run starts the system on setup and runs rounds until cfg says stop or a
// round does not converge (a *DivergenceError). Call it from the test's
// goroutine: the faults restart servers through t.
func Run(t testing.TB, setup Setup, cfg Config) (Report, error) {
	t.Helper()
	cfg.defaults()
	kinds := cfg.Faults
	if kinds == nil {
		for _, k := range AllFaults {
			if k != FaultMariaDB || setup.MariaDB != nil || setup.Galera != nil {
				kinds = append(kinds, k)
			}
		}
	}
	s := Start(t, setup)
	s.model, s.observer = &fleetModel{}, newObserver(s.env.DB.Ent)
	observing, stopObserving := context.WithCancel(context.Background())
	var observed sync.WaitGroup
	observed.Go(func() { s.observer.run(observing) })
	defer func() {
		stopObserving()
		observed.Wait()
	}()
	rep := Report{Seed: cfg.Seed, Ops: map[string]OpStats{}, Faults: map[string]int{}, verdict: verdictState{judged: map[string]bool{}, pending: map[string]endedRollout{}, planned: map[string]bool{}}}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	ctx := context.Background()
	began := time.Now()
	for round := 1; ; round++ {
		if cfg.Duration > 0 && time.Since(began) >= cfg.Duration || cfg.Duration <= 0 && round > cfg.Rounds {
			break
		}
		took, desired, err := s.round(ctx, round, rng.Uint64(), kinds, cfg, &rep)
		rep.RetentionRows = s.retentionRows
		if err != nil {
			return rep, err
		}
		rep.Rounds = round
		rep.Converge = append(rep.Converge, took)
		rep.Desired = append(rep.Desired, desired)
	}
	return rep, nil
}

// round runs operators and the fault schedule concurrently, then waits for
// convergence and returns how long that took and how many objects were
// desired then.
func (s *System) round(ctx context.Context, n int, seed uint64, kinds []string, cfg Config, rep *Report) (time.Duration, int, error) {
	rng := rand.New(rand.NewPCG(seed, 0))
	operators := 2 + rng.IntN(maxOperators-1)
	release := releaseRound(n)
	each := cfg.Each
	if release && slices.Contains(kinds, FaultPrometheus) {
		// Two outages, so that the canary's Prometheus is likely down once.
		each = append(slices.Clip(each), FaultPrometheus)
	}
	var steps []step
	if len(kinds) > 0 {
		steps = s.schedule(rng, kinds, each, 3+rng.IntN(4), cfg.RoundLength)
	}
	schedule := []string{"(no faults)"}
	if len(steps) > 0 {
		schedule = nil
	}
	for _, st := range steps {
		schedule = append(schedule, fmt.Sprintf("%6.2fs %s", st.at.Seconds(), st.what))
	}
	kind := ""
	if release {
		kind = " (a release round)"
	}
	s.logf("round %d%s: %d operators for %s, %d fault steps", n, kind, operators, cfg.RoundLength, len(steps))

	counts := &opCounter{inOutage: s.dbOutage.now}
	opsCtx, stopOps := context.WithTimeout(ctx, cfg.RoundLength)
	var wg sync.WaitGroup
	defer func() { // also when a step ends the test
		stopOps()
		wg.Wait()
	}()
	for i := range operators {
		o := &operator{client: s.operators[i], name: operatorName(i), rng: rand.New(rand.NewPCG(seed, uint64(i+1))), count: counts,
			carries: s.carries, immediate: s.judgeImmediate, release: release}
		wg.Go(func() { o.run(opsCtx) })
	}
	fleetOp := &fleetOperator{clients: s.fleet, db: s.env.DB, rng: rand.New(rand.NewPCG(seed, 100)), model: s.model, count: counts}
	wg.Go(func() { fleetOp.run(opsCtx) })
	// Rollouts are read as they end, also during the round, and judged a
	// moment later: one whose deployment an operator deletes afterwards
	// goes with it.
	var judging sync.WaitGroup
	var judgeErr error
	judging.Go(func() {
		for opsCtx.Err() == nil {
			violations, err := s.rolloutVerdict(opsCtx, &rep.verdict, &rep.Rollouts, false)
			if len(violations) > 0 {
				judgeErr = fmt.Errorf("rollouts broke their promise:\n  %s", strings.Join(violations, "\n  "))
				return
			}
			_ = err // ctrld or its database down on purpose: the next look, or the round's end, judges
			select {
			case <-opsCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	faultErr := s.runSchedule(ctx, start, steps, rep.Faults)
	if faultErr != nil {
		stopOps()
	}
	wg.Wait()
	stopOps()
	judging.Wait()
	if judgeErr != nil {
		return 0, 0, fmt.Errorf("round %d (seed %d): %w", n, rep.Seed, judgeErr)
	}
	for op, c := range counts.ops {
		sum := rep.Ops[op]
		sum.OK, sum.Rejected, sum.Failed = sum.OK+c.OK, sum.Rejected+c.Rejected, sum.Failed+c.Failed
		sum.InOutage += c.InOutage
		rep.Ops[op] = sum
	}
	rep.Fences.add(counts.fences)
	rep.Strategies.add(counts.strategies)
	defer func() { rep.Fleet = s.model.snapshot() }()
	if faultErr != nil {
		return 0, 0, fmt.Errorf("round %d (seed %d): %w", n, rep.Seed, faultErr)
	}
	if len(counts.violations) > 0 {
		return 0, 0, fmt.Errorf("round %d (seed %d): ctrld accepted calls it must refuse, or a refused call changed something:\n  %s", n, rep.Seed, strings.Join(counts.violations, "\n  "))
	}

	// Operations and faults are over: from here the system must converge
	// by itself, its rollouts ended first (an operator resumes what was
	// paused and aborts what halted).
	// A rollout that does not end is reported with how the regions
	// differ then, which may say why.
	// The fleet's controls are lifted first, as on-call would: every
	// halt, recurring window and bound goes (queued rollouts then
	// start), and now and then a short freeze closes as they settle.
	if err := s.liftAll(ctx, s.model, fleetOp); err != nil {
		return 0, 0, fmt.Errorf("round %d (seed %d): %w", n, rep.Seed, err)
	}
	fleetOp.closingFreeze(ctx)
	if v := s.model.takeViolations(); len(v) > 0 {
		return 0, 0, fmt.Errorf("round %d (seed %d): the fleet's controls broke their promise:\n  %s", n, rep.Seed, strings.Join(v, "\n  "))
	}
	settling := time.Now()
	unsettled := s.settleRollouts(ctx, cfg.ConvergeWithin, &rep.Rollouts)
	s.logf("round %d: rollouts in flight ended %s after operations and faults ended", n, time.Since(settling).Round(time.Millisecond))
	took, v := converge(ctx, cfg.ConvergeWithin, s.divergence)
	if problems := append(unsettled, v.problems...); len(problems) > 0 {
		return 0, 0, &DivergenceError{Seed: rep.Seed, Round: n, Within: cfg.ConvergeWithin, Problems: problems, Schedule: schedule}
	}
	violations, err := s.rolloutVerdict(ctx, &rep.verdict, &rep.Rollouts, true)
	if err != nil {
		return 0, 0, fmt.Errorf("round %d (seed %d): %w", n, rep.Seed, err)
	}
	if len(violations) > 0 {
		return 0, 0, fmt.Errorf("round %d (seed %d): rollouts broke their promise:\n  %s", n, rep.Seed, strings.Join(violations, "\n  "))
	}
	// The fleet verdicts read every rollout's wave starts as the
	// database recorded them, up to now.
	if err := s.observer.poll(ctx); err != nil {
		return 0, 0, fmt.Errorf("round %d (seed %d): read the rollouts: %w", n, rep.Seed, err)
	}
	violations = append(s.fleetVerdict(s.observer, s.model), s.model.takeViolations()...)
	if len(violations) > 0 {
		return 0, 0, fmt.Errorf("round %d (seed %d): the fleet's controls broke their promise:\n  %s", n, rep.Seed, strings.Join(violations, "\n  "))
	}
	s.logf("round %d: converged %s after operations and faults ended (%d objects desired)", n, took.Round(time.Millisecond), v.desired)
	return took, v.desired, nil
}

// settle is how long a converged state must hold before it counts: a
// region that matches but then changes again had an apply still coming.
const settle = time.Second

// verdict is one comparison of every region with desired state.
type verdict struct {
	problems []string // how the regions differ; nil when they do not
	desired  int      // objects desired, over all regions
}

// converge waits until check finds no problem, and keeps finding none for
// settle; it returns how long that took with the last verdict, or a
// verdict with problems when within has passed: the last divergence found,
// or that the match had not held for settle yet.
func converge(ctx context.Context, within time.Duration, check func(context.Context) verdict) (time.Duration, verdict) {
	start := time.Now()
	deadline := start.Add(within)
	var matched time.Time // when the current run of matching checks began
	for {
		v := check(ctx)
		switch {
		case len(v.problems) > 0:
			matched = time.Time{}
		case matched.IsZero():
			matched = time.Now()
		case time.Since(matched) >= settle:
			return matched.Sub(start), v
		}
		if time.Now().After(deadline) {
			if len(v.problems) == 0 {
				v.problems = []string{fmt.Sprintf("every region matched, but only for the last %s, not the %s a convergence must hold",
					time.Since(matched).Round(time.Millisecond), settle)}
			}
			return 0, v
		}
		select {
		case <-ctx.Done():
			return 0, verdict{problems: append(v.problems, ctx.Err().Error())}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// divergence lists how the regions differ from desired state, prefixed by
// region, and counts the objects desired.
func (s *System) divergence(ctx context.Context) verdict {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	want, err := s.desired(ctx)
	if err != nil {
		return verdict{problems: []string{"cannot read desired state: " + err.Error()}}
	}
	v := verdict{}
	for _, w := range want {
		v.desired += len(w)
	}
	v.problems = s.compare(ctx, want)
	return v
}

// compare lists how the regions differ from want, and any agent that is
// not running, connected and caught up.
func (s *System) compare(ctx context.Context, want map[string]view) []string {
	var problems []string
	for _, name := range Regions {
		r := s.regions[name]
		got, err := r.actual(ctx)
		if err != nil {
			problems = append(problems, name+": cannot list the cluster: "+err.Error())
			continue
		}
		for _, line := range diff(want[name], got) {
			problems = append(problems, name+": "+line)
		}
		if r.agent == nil {
			problems = append(problems, name+": no agent running")
		} else if exited, err := r.agent.exited(); exited {
			problems = append(problems, fmt.Sprintf("%s: the agent stopped by itself: %v", name, err))
		}
	}
	// Matching objects are not enough: an agent with changes still to apply
	// may yet move away from them.
	regions, err := s.control.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil {
		return append(problems, "cannot list regions: "+err.Error())
	}
	seen := 0
	for _, o := range regions.GetRegions() {
		if !slices.Contains(Regions, o.Region) {
			continue
		}
		seen++
		switch {
		case !o.AgentConnected:
			problems = append(problems, o.Region+": agent not connected")
		case o.Paused:
			problems = append(problems, o.Region+": paused")
		case o.LagChanges > 0:
			problems = append(problems, fmt.Sprintf("%s: agent lags %d changes (acked %d, head %d)", o.Region, o.LagChanges, o.AckedVersion, o.HeadVersion))
		}
		if len(problems) > 0 && o.LastError != "" {
			problems = append(problems, o.Region+": agent's last error: "+o.LastError)
		}
	}
	if seen < len(Regions) {
		problems = append(problems, fmt.Sprintf("ctrld lists %d of the %d regions", seen, len(Regions)))
	}
	return problems
}
