package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/instance"
)

// Config tunes the workflow.
type Config struct {
	// Timeout after which a deployment that is not ready fails (default 5m).
	Timeout time.Duration
	// Interval between evaluations (default 1s).
	Interval time.Duration
	// FullPass is how often an evaluation decides every unfinished
	// deployment, whatever changed (default 1m). Other evaluations read
	// what changed since the last one by updated_at, which the writing
	// replica's clock stamps when it writes, not when it commits: a report
	// whose transaction commits more than changeOverlap after its write
	// (a long lock wait, a Galera node's flow control), or a replica whose
	// clock is that far behind, is missed by them; the full pass decides
	// it at most FullPass late, instead of at its timeout.
	FullPass time.Duration
}

// Driver evaluates deploy workflows.
type Driver struct {
	client  *ent.Client
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time

	// evaluated is when the last evaluation that read every change began;
	// zero until one has (then every unfinished deployment is read).
	evaluated time.Time
	// fullPass is when the last evaluation that decided every unfinished
	// deployment began.
	fullPass time.Time
	// lastBatch is how long the round's previous batch took, zero before
	// its first: the next batch rests as long first (see decideBatch).
	lastBatch time.Duration
}

// Defaults are the production settings zero Config fields take (ctrld's
// flags show them).
var Defaults = Config{Timeout: 5 * time.Minute, Interval: time.Second, FullPass: time.Minute}

// batchSize bounds the deployments one round of reads and writes covers.
const batchSize = 500

// changeOverlap is how far before the last evaluation changes are read
// again: updated_at is written by whichever replica's clock, and clocks
// differ. Deciding a deployment twice changes nothing.
const changeOverlap = 30 * time.Second

// New returns a Driver.
func New(client *ent.Client, cfg Config, log *slog.Logger, m *metrics.Metrics) *Driver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = Defaults.Timeout
	}
	if cfg.Interval <= 0 {
		cfg.Interval = Defaults.Interval
	}
	if cfg.FullPass <= 0 {
		cfg.FullPass = Defaults.FullPass
	}
	return &Driver{client: client, cfg: cfg, log: log, metrics: m, now: time.Now}
}

// Run evaluates every Interval until ctx ends.
func (d *Driver) Run(ctx context.Context) {
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	for {
		if err := d.Evaluate(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("workflow: evaluation failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Evaluate moves unfinished deployments' workflows forward, at a cost
// proportional to what changed: it decides the deployments whose
// instances or topologies changed since the last evaluation (all
// unfinished ones on the first, and once per FullPass), then those past
// Timeout, oldest first.
// Nothing else is read, however many deployments wait (a deployment
// whose instances never come is decided once, when it times out), and
// the decisions are written a batch per statement.
func (d *Driver) Evaluate(ctx context.Context) error {
	start := d.now()
	d.lastBatch = 0
	if d.evaluated.IsZero() || start.Sub(d.fullPass) >= d.cfg.FullPass {
		if err := d.decideAllUnfinished(ctx, start); err != nil {
			return err
		}
		d.fullPass = start
	} else if err := d.decideChangedSince(ctx, d.evaluated.Add(-changeOverlap), start); err != nil {
		return err
	}
	if err := d.decideTimedOut(ctx, start); err != nil {
		return err
	}
	d.evaluated = start
	return nil
}

// unfinished holds for the deployments whose workflow is not decided.
var unfinished = deployment.WorkflowStatusIn(deployment.WorkflowStatusPending, deployment.WorkflowStatusDeploying)

// decideAllUnfinished decides every unfinished deployment, a batch at a
// time in ID order.
func (d *Driver) decideAllUnfinished(ctx context.Context, now time.Time) error {
	after := ""
	for {
		ids, err := d.client.Deployment.Query().Where(unfinished, deployment.IDGT(after)).
			Order(ent.Asc(deployment.FieldID)).Limit(batchSize).IDs(ctx)
		if err != nil {
			return fmt.Errorf("list unfinished deployments: %w", err)
		}
		if err := d.decideBatch(ctx, ids, now); err != nil || len(ids) < batchSize {
			return err
		}
		after = ids[len(ids)-1]
	}
}

// decideChangedSince decides the unfinished deployments with an instance
// or topology written since since.
func (d *Driver) decideChangedSince(ctx context.Context, since, now time.Time) error {
	// Unfinished ones only, in SQL: every status report rewrites its
	// instances, most of finished deployments.
	fromInstances, err := d.client.Instance.Query().Where(instance.UpdatedAtGTE(since), instance.HasDeploymentWith(unfinished)).
		Unique(true).Select(instance.FieldDeploymentID).Strings(ctx)
	if err != nil {
		return fmt.Errorf("read changed instances: %w", err)
	}
	fromTopologies, err := d.client.DeploymentTopology.Query().
		Where(deploymenttopology.UpdatedAtGTE(since), deploymenttopology.HasDeploymentWith(unfinished)).
		Unique(true).Select(deploymenttopology.FieldDeploymentID).Strings(ctx)
	if err != nil {
		return fmt.Errorf("read changed topologies: %w", err)
	}
	changed := slices.Compact(slices.Sorted(slices.Values(append(fromInstances, fromTopologies...))))
	for batch := range slices.Chunk(changed, batchSize) {
		if err := d.decideBatch(ctx, batch, now); err != nil {
			return err
		}
	}
	return nil
}

// decideTimedOut decides the unfinished deployments created more than
// Timeout before now, oldest first, until none is left: each is decided
// (ready or failed), so each round takes the next ones. One status at a
// time: the (workflow_status, created_at) index then hands out each batch
// in order, where both statuses at once would sort every timed-out row
// again for every batch.
func (d *Driver) decideTimedOut(ctx context.Context, now time.Time) error {
	for _, status := range []deployment.WorkflowStatus{deployment.WorkflowStatusPending, deployment.WorkflowStatusDeploying} {
		for {
			ids, err := d.client.Deployment.Query().
				Where(deployment.WorkflowStatusEQ(status), deployment.CreatedAtLT(now.Add(-d.cfg.Timeout))).
				Order(ent.Asc(deployment.FieldCreatedAt)).Limit(batchSize).IDs(ctx)
			if err != nil {
				return fmt.Errorf("list timed-out deployments: %w", err)
			}
			if err := d.decideBatch(ctx, ids, now); err != nil {
				return err
			}
			if len(ids) < batchSize {
				break
			}
		}
	}
	return nil
}

// rest waits for d, or until ctx ends.
func rest(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// decision is one deployment's workflow moving from one status to another.
type decision struct {
	id       string
	from, to deployment.WorkflowStatus
	reason   string
}

// decideBatch decides the workflows of the unfinished deployments among
// ids and writes those that move.
//
// A batch that follows another in the same round first rests as long as
// the one before took: a round of many batches (a sweep of 100,000
// timeouts) takes the database at most half the time, and full syncs and
// operators' writes go on beside it at nearly their quiet pace; a round of
// one batch does not wait at all.
func (d *Driver) decideBatch(ctx context.Context, ids []string, now time.Time) (err error) {
	if len(ids) == 0 {
		return nil
	}
	if err := rest(ctx, d.lastBatch); err != nil {
		return err
	}
	start := time.Now()
	defer func() { d.lastBatch = time.Since(start) }()
	deps, err := d.client.Deployment.Query().
		Where(deployment.IDIn(ids...), unfinished).
		WithTopologies(func(q *ent.DeploymentTopologyQuery) {
			q.Where(deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning))
		}).
		WithInstances().
		All(ctx)
	if err != nil {
		return fmt.Errorf("load unfinished deployments: %w", err)
	}
	var moves []decision
	for _, dep := range deps {
		next, reason := d.decide(dep, now)
		if next != dep.WorkflowStatus {
			moves = append(moves, decision{dep.ID, dep.WorkflowStatus, next, reason})
		}
	}
	return d.write(ctx, moves)
}

// write stores decisions: one UPDATE per (from, to) pair, each row's
// reason chosen by its ID. Only rows still in the status that was read
// move: another replica may have moved them meanwhile.
func (d *Driver) write(ctx context.Context, moves []decision) error {
	groups := map[[2]deployment.WorkflowStatus][]decision{}
	for _, m := range moves {
		k := [2]deployment.WorkflowStatus{m.from, m.to}
		groups[k] = append(groups[k], m)
	}
	for k, group := range groups {
		ids := make([]string, len(group))
		reasons := make([]any, 0, 2*len(group))
		for i, m := range group {
			ids[i] = m.id
			reasons = append(reasons, m.id, m.reason)
		}
		byID := "CASE `" + deployment.FieldID + "`" + strings.Repeat(" WHEN ? THEN ?", len(group)) + " END"
		n, err := d.client.Deployment.Update().
			Where(deployment.IDIn(ids...), deployment.WorkflowStatusEQ(k[0])).
			SetWorkflowStatus(k[1]).
			Modify(func(u *sql.UpdateBuilder) { u.Set(deployment.FieldWorkflowError, sql.Expr(byID, reasons...)) }).
			Save(changefeed.ActualState(ctx))
		if err != nil {
			return fmt.Errorf("update the workflow of %d deployments (%s -> %s): %w", len(group), k[0], k[1], err)
		}
		if to := k[1]; n > 0 && (to == deployment.WorkflowStatusReady || to == deployment.WorkflowStatusFailed) {
			d.metrics.WorkflowsDecided.WithLabelValues(string(to)).Add(float64(n))
			d.log.Info("workflow: deployments finished", "status", to, "count", n, "first", group[0].id, "reason", group[0].reason)
		}
	}
	return nil
}

func (d *Driver) decide(dep *ent.Deployment, now time.Time) (deployment.WorkflowStatus, string) {
	// Only instances in regions where the deployment should run count: an
	// instance stored anywhere else (by an agent of another region, before
	// intake checked that) says nothing about this deployment's progress.
	runsIn := map[string]bool{}
	for _, t := range dep.Edges.Topologies {
		runsIn[t.Region] = true
	}
	instances, ready := 0, map[string]int{}
	for _, in := range dep.Edges.Instances {
		if !runsIn[in.Region] {
			continue
		}
		instances++
		if in.Ready && in.Status == instance.StatusRunning {
			ready[in.Region]++
		}
	}
	var short []string
	for _, t := range dep.Edges.Topologies {
		if ready[t.Region] < t.Replicas {
			short = append(short, fmt.Sprintf("%s %d/%d ready", t.Region, ready[t.Region], t.Replicas))
		}
	}
	switch {
	case len(short) == 0:
		return deployment.WorkflowStatusReady, ""
	case now.Sub(dep.CreatedAt) > d.cfg.Timeout:
		return deployment.WorkflowStatusFailed, fmt.Sprintf("not ready after %s: %s", d.cfg.Timeout, strings.Join(short, ", "))
	case instances > 0:
		return deployment.WorkflowStatusDeploying, ""
	}
	return dep.WorkflowStatus, ""
}
