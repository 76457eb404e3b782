// Package workflow drives each deployment's deploy workflow status from
// what agents report: pending (created) → deploying (an instance exists in
// a region where it should run) → ready (in every region where it should run, as many
// instances are running and ready as it has replicas) or failed (not ready
// within Timeout of its creation). The status is derived from the database
// alone, so any ctrld replica may evaluate it, and a restart loses nothing.
package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

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
}

// Driver evaluates deploy workflows.
type Driver struct {
	client  *ent.Client
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
}

// Defaults are the production settings zero Config fields take (ctrld's
// flags show them).
var Defaults = Config{Timeout: 5 * time.Minute, Interval: time.Second}

// New returns a Driver.
func New(client *ent.Client, cfg Config, log *slog.Logger, m *metrics.Metrics) *Driver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = Defaults.Timeout
	}
	if cfg.Interval <= 0 {
		cfg.Interval = Defaults.Interval
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

// Evaluate moves every unfinished deployment's workflow forward.
func (d *Driver) Evaluate(ctx context.Context) error {
	deps, err := d.client.Deployment.Query().
		Where(deployment.WorkflowStatusIn(deployment.WorkflowStatusPending, deployment.WorkflowStatusDeploying)).
		WithTopologies(func(q *ent.DeploymentTopologyQuery) {
			q.Where(deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning))
		}).
		WithInstances().
		Limit(1000).All(ctx)
	if err != nil {
		return fmt.Errorf("load unfinished deployments: %w", err)
	}
	now := d.now()
	for _, dep := range deps {
		next, reason := d.decide(dep, now)
		if next == dep.WorkflowStatus {
			continue
		}
		// Only from the status we read: another replica may have moved it.
		err := d.client.Deployment.Update().
			Where(deployment.ID(dep.ID), deployment.WorkflowStatusEQ(dep.WorkflowStatus)).
			SetWorkflowStatus(next).SetWorkflowError(reason).
			Exec(changefeed.ActualState(ctx))
		if err != nil {
			return fmt.Errorf("update workflow of %s: %w", dep.ID, err)
		}
		if next == deployment.WorkflowStatusReady || next == deployment.WorkflowStatusFailed {
			d.metrics.WorkflowsDecided.WithLabelValues(string(next)).Inc()
			d.log.Info("workflow: deployment finished", "deployment", dep.ID, "status", next, "reason", reason)
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
