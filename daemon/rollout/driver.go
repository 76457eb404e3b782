package rollout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/regionhealth"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/instance"
	"github.com/deploysync/deploysync/ent/resourcesync"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/rpc"
)

// Driver moves the rollouts in flight on. Every replica runs one.
type Driver struct {
	Store  *desired.Store
	Client *ent.Client
	DB     *sql.DB
	Log    *slog.Logger
	// Interval is the time between looks; 1 s when 0. A bake of a
	// minute then ends within a second of its time.
	Interval time.Duration
	// Now is the clock; the database's when nil (store.Now), which every
	// replica shares: a replica whose own clock runs ahead must not end a
	// bake early, nor fail a deadline or read agents as gone.
	Now func() time.Time
	// Metrics, when set, receive the rollouts' gauge and counters.
	Metrics *metrics.Metrics
	// Notify, when set, is called after a step that promoted or rolled
	// back regions, so the tailers read its changes now.
	Notify func()

	poke     chan struct{}
	pokeOnce sync.Once
}

// minGap is the least time between two looks a poke brings forward
// (longer when a look takes long, see Run): pokes (a report per agent per
// second, or more) are coalesced into at most one look this often.
const minGap = 50 * time.Millisecond

// Poke asks for a look now, not at the next tick: an agent's report may
// have passed a gate. Pokes while a look is due are one.
func (d *Driver) Poke() {
	select {
	case d.pokes() <- struct{}{}:
	default:
	}
}

func (d *Driver) pokes() chan struct{} {
	d.pokeOnce.Do(func() { d.poke = make(chan struct{}, 1) })
	return d.poke
}

// Run looks at the rollouts every Interval until ctx ends. A look that
// fails (the database away) is logged and the next one tries again: the
// state is the database's, so nothing is lost.
func (d *Driver) Run(ctx context.Context) {
	interval := d.Interval
	if interval == 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		began := time.Now()
		if _, err := d.Round(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("rollout: a look at the rollouts failed; trying again", "err", err)
		}
		took := time.Since(began)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.pokes():
			// Reports may poke without end (an agent per region, each a
			// second, or a leaked token in a loop): looks they bring
			// forward take at most a fifth of the time.
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(minGap, 4*took)):
			}
		}
	}
}

// Round looks at every progressing rollout once and writes the steps
// that changed something; it returns how many were written. A step
// another replica (or an operator) wrote first is dropped: the next round
// decides again from what is there.
func (d *Driver) Round(ctx context.Context) (int, error) {
	if err := d.count(ctx); err != nil {
		return 0, err
	}
	inFlight, err := fleet.InFlight(d.Client).All(ctx)
	if err != nil {
		return 0, err
	}
	var rollouts []*ent.Rollout // progressing
	for _, r := range inFlight {
		if r.State == rollout.StateProgressing {
			rollouts = append(rollouts, r)
		}
	}
	d.countWithoutVerdict(rollouts)
	controls, err := fleet.ReadControls(ctx, d.Client)
	if err != nil {
		return 0, err
	}
	for _, r := range inFlight {
		controls.Rollouts = append(controls.Rollouts, fleet.RolloutOf(r))
	}
	now, err := d.now(ctx)
	if err != nil {
		return 0, err
	}
	plan := controls.Plan(now.Add(d.Store.WindowOffset()))
	if d.countHeld(plan, inFlight); len(inFlight) == 0 {
		return 0, nil
	}
	written, failed := d.start(ctx, plan, inFlight)
	looks, err := d.look(ctx, rollouts, now)
	if err != nil {
		return written, err
	}
	for _, r := range rollouts {
		step, ok := Decide(r, looks[r.DeploymentID], now)
		if !ok {
			continue
		}
		// A wave the fleet's controls hold does not start: the rollout
		// stays on its baked wave (its gate still watching) until they
		// let it. StepRollout reads them again under their lock.
		if step.Advance && plan.Of(r.ID).Held() {
			continue
		}
		err := d.Store.StepRollout(ctx, step)
		switch {
		case errors.Is(err, desired.ErrConcurrentChange):
			continue
		case err != nil:
			// One rollout whose step keeps failing must not stop the
			// others' steps: the round goes on, and says which failed.
			failed = append(failed, fmt.Errorf("rollout of %s to revision %d: %w", r.DeploymentID, r.Revision, err))
			continue
		}
		written++
		if (step.Halt || step.Advance) && d.Notify != nil {
			d.Notify()
		}
		d.countStep(r, step)
		switch {
		case step.Halt:
			d.Log.Warn("rollout: a wave failed", "deployment", r.DeploymentID, "revision", r.Revision,
				"on_failure", r.Strategy.OnFailure, "reason", step.Reason)
		case step.Advance:
			d.Log.Info("rollout: wave passed", "deployment", r.DeploymentID, "revision", r.Revision,
				"wave", r.Wave+1, "of", len(r.Strategy.Waves))
		}
	}
	return written, errors.Join(failed...)
}

// start starts the queued rollouts the plan lets start, in order; each
// start reads the fleet's controls again under their lock, so a halt, a
// window or another replica's start since the plan's read holds it.
func (d *Driver) start(ctx context.Context, plan *fleet.Plan, inFlight []*ent.Rollout) (int, []error) {
	written := 0
	var failed []error
	for _, id := range plan.Start() {
		i := slices.IndexFunc(inFlight, func(r *ent.Rollout) bool { return r.ID == id })
		r := inFlight[i]
		err := d.Store.StartRollout(ctx, r.ID, r.Version)
		switch {
		case errors.Is(err, desired.ErrConcurrentChange):
			continue
		case err != nil:
			failed = append(failed, fmt.Errorf("start of the rollout of %s to revision %d: %w", r.DeploymentID, r.Revision, err))
			continue
		}
		written++
		if d.Notify != nil {
			d.Notify()
		}
		d.Log.Info("rollout: started", "deployment", r.DeploymentID, "revision", r.Revision)
	}
	return written, failed
}

// now is the time of a look: the database's clock, read before anything
// the look reads, so that no report it reads is newer than the look.
func (d *Driver) now(ctx context.Context) (time.Time, error) {
	if d.Now != nil {
		return d.Now(), nil
	}
	return store.Now(ctx, d.DB)
}

// count sets the gauge of rollouts in flight by state.
func (d *Driver) count(ctx context.Context) error {
	if d.Metrics == nil {
		return nil
	}
	var counts []struct {
		State string `json:"state"`
		Count int    `json:"count"`
	}
	err := d.Client.Rollout.Query().Where(rollout.InFlightNotNil()).GroupBy(rollout.FieldState).Aggregate(ent.Count()).Scan(ctx, &counts)
	if err != nil {
		return err
	}
	for _, state := range []rollout.State{rollout.StateQueued, rollout.StateProgressing, rollout.StatePaused, rollout.StateHalted} {
		n := 0
		for _, c := range counts {
			if c.State == string(state) {
				n = c.Count
			}
		}
		d.Metrics.Rollouts.WithLabelValues(string(state)).Set(float64(n))
	}
	return nil
}

// countWithoutVerdict sets the gauge of regions whose bake is over but
// a check of which has no verdict, as of the round before.
func (d *Driver) countWithoutVerdict(rollouts []*ent.Rollout) {
	if d.Metrics == nil {
		return
	}
	n := 0
	for _, r := range rollouts {
		for _, st := range r.Regions {
			if st.State == desired.RegionBaking && strings.HasPrefix(st.Why, awaitingVerdict) {
				n++
			}
		}
	}
	d.Metrics.ChecksWithoutVerdict.Set(float64(n))
}

// countStep counts the gate failures and the halt a written step made.
func (d *Driver) countStep(r *ent.Rollout, step desired.RolloutStep) {
	if d.Metrics == nil {
		return
	}
	for region, st := range step.Regions {
		if st.State == desired.RegionFailed && r.Regions[region].State != desired.RegionFailed {
			d.Metrics.GateFailures.Inc()
		}
	}
	if step.Halt {
		d.Metrics.RolloutHalts.WithLabelValues(r.Strategy.OnFailure).Inc()
	}
}

// look reads what the rollouts' deployments look like in every region:
// six reads for all of them, whatever their number.
func (d *Driver) look(ctx context.Context, rollouts []*ent.Rollout, now time.Time) (map[string]map[string]Region, error) {
	ids := make([]string, 0, len(rollouts))
	for _, r := range rollouts {
		ids = append(ids, r.DeploymentID)
	}
	serving, err := regionhealth.ReadServing(ctx, d.Client, d.DB, now)
	if err != nil {
		return nil, err
	}
	looks := make(map[string]map[string]Region, len(ids))
	topologies, err := d.Client.DeploymentTopology.Query().Where(deploymenttopology.DeploymentIDIn(ids...)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range topologies {
		if looks[t.DeploymentID] == nil {
			looks[t.DeploymentID] = map[string]Region{}
		}
		serves := serving[t.Region]
		looks[t.DeploymentID][t.Region] = Region{Present: true, Replicas: t.Replicas,
			Stopped: t.DesiredStatus == deploymenttopology.DesiredStatusStopped,
			Paused:  serves.Paused, Connected: serves.Connected, Heard: serves.Heard, ConnectedSince: serves.ConnectedSince}
	}
	at := func(dep, region string, change func(*Region)) {
		if r, ok := looks[dep][region]; ok {
			change(&r)
			looks[dep][region] = r
		}
	}
	syncs, err := d.Client.ResourceSync.Query().
		Where(resourcesync.KindEQ(resourcesync.Kind(rpc.KindDeployment)), resourcesync.ResourceIDIn(ids...)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range syncs {
		at(s.ResourceID, s.Region, func(r *Region) {
			r.Applied, r.Received, r.InSync, r.ApplyError = s.AppliedVersion, s.ReceivedVersion, s.InSync, s.Error
		})
	}
	instances, err := d.Client.Instance.Query().Where(instance.DeploymentIDIn(ids...)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range instances {
		at(in.DeploymentID, in.Region, func(r *Region) {
			r.Instances = append(r.Instances, Instance{Pod: in.PodName, SpecHash: in.SpecHash, Ready: in.Ready, Status: string(in.Status),
				Reason: in.Reason, Restarts: int(in.Restarts), Evidence: in.Evidence})
		})
	}
	var checked []int
	for _, r := range rollouts {
		if len(r.Strategy.Checks) > 0 {
			checked = append(checked, r.ID)
		}
	}
	evaluations, err := ReadEvaluations(ctx, d.Client, checked)
	if err != nil {
		return nil, err
	}
	for _, r := range rollouts {
		for region, byCheck := range evaluations[r.ID] {
			at(r.DeploymentID, region, func(reg *Region) { reg.Checks = byCheck })
		}
	}
	return looks, nil
}

// countHeld sets the gauges of the fleet's controls: the rollouts they
// hold by kind, the halts that stand and the windows closed.
func (d *Driver) countHeld(plan *fleet.Plan, inFlight []*ent.Rollout) {
	if d.Metrics == nil {
		return
	}
	held := map[fleet.Kind]int{}
	for _, r := range inFlight {
		switch {
		case r.State == rollout.StatePaused && r.HaltID != nil:
			held[fleet.KindHalt]++
		case r.State == rollout.StateQueued, r.State == rollout.StateProgressing:
			if h := plan.Of(r.ID); h.Held() {
				held[h.Kind]++
			}
		}
	}
	state, closed := plan.State(), 0
	for _, w := range state.Windows {
		if _, c := w.ClosedUntil(plan.Now()); c {
			closed++
		}
	}
	halts := len(state.Halts)
	for _, k := range []fleet.Kind{fleet.KindHalt, fleet.KindFreeze, fleet.KindPacing} {
		d.Metrics.RolloutsHeld.WithLabelValues(string(k)).Set(float64(held[k]))
	}
	d.Metrics.FleetHalts.Set(float64(halts))
	d.Metrics.FreezeWindowsClosed.Set(float64(closed))
}
