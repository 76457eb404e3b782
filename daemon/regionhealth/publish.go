package regionhealth

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
)

// DefaultInterval is Config.Interval's default.
const DefaultInterval = 5 * time.Second

// Config tunes a Publisher.
type Config struct {
	// Interval between two computations of the gauges (default
	// DefaultInterval).
	Interval time.Duration
}

// Publisher keeps ctrld's per-region gauges (deploysync_stream_lag_changes,
// deploysync_region_*) up to date.
type Publisher struct {
	client  *ent.Client
	db      *sql.DB
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	// published are the regions the gauges hold series for, so that those
	// of a region no longer registered can be deleted.
	published map[string]bool
}

// NewPublisher returns a Publisher reading through client and db (the main
// pool: a few short queries per round).
func NewPublisher(client *ent.Client, db *sql.DB, cfg Config, log *slog.Logger, m *metrics.Metrics) *Publisher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Publisher{client: client, db: db, cfg: cfg, log: log, metrics: m, published: map[string]bool{}}
}

// Run publishes every Interval until ctx ends. A failed round leaves the
// gauges as they were and is logged; the next one tries again.
func (p *Publisher) Run(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		if err := p.PublishOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("region health: cannot compute the region gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// PublishOnce computes every region's health and sets the gauges.
func (p *Publisher) PublishOnce(ctx context.Context) error {
	now, err := store.Now(ctx, p.db) // heartbeats are stamped by the database's clock
	if err != nil {
		return err
	}
	regions, err := read(ctx, p.client, p.db, "", now, false)
	if err != nil {
		return err
	}
	m := p.metrics
	seen := map[string]bool{}
	for _, h := range regions {
		seen[h.Region] = true
		m.StreamLag.WithLabelValues(h.Region).Set(float64(h.LagChanges))
		m.RegionLagSeconds.WithLabelValues(h.Region).Set(h.LagSeconds(now))
		m.AgentConnected.WithLabelValues(h.Region).Set(boolGauge(h.Connected))
		m.RegionPaused.WithLabelValues(h.Region).Set(boolGauge(h.Paused))
		m.FailingResources.WithLabelValues(h.Region).Set(float64(h.FailingResources))
		setAge(m.HeartbeatAge, h.Region, h.Agent, func(a *ent.Agent) *time.Time { return a.LastHeartbeat }, now)
		setAge(m.FullSyncAge, h.Region, h.Agent, func(a *ent.Agent) *time.Time { return a.LastFullSync }, now)
	}
	for region := range p.published {
		if !seen[region] {
			p.forget(region)
		}
	}
	p.published = seen
	return nil
}

// setAge sets region's series of g to the age of the agent's time at, or
// deletes it when there is no such time: an age since never is no number.
func setAge(g *prometheus.GaugeVec, region string, a *ent.Agent, at func(*ent.Agent) *time.Time, now time.Time) {
	if a == nil || at(a) == nil {
		g.DeleteLabelValues(region)
		return
	}
	g.WithLabelValues(region).Set(max(0, now.Sub(*at(a)).Seconds()))
}

// forget deletes the series of a region no longer registered.
func (p *Publisher) forget(region string) {
	m := p.metrics
	for _, g := range []*prometheus.GaugeVec{m.StreamLag, m.RegionLagSeconds, m.AgentConnected, m.RegionPaused, m.FailingResources, m.HeartbeatAge, m.FullSyncAge} {
		g.DeleteLabelValues(region)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
