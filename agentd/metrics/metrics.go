package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are agentd's metrics; create one set per process with New.
type Metrics struct {
	EventsReceived *prometheus.CounterVec
	Applied        *prometheus.CounterVec
	Failed         *prometheus.CounterVec
	ApplyDuration  *prometheus.HistogramVec
	AckedCursor    prometheus.Gauge
	Lag            prometheus.Gauge
	QueueDepth     prometheus.Gauge
	FullSyncs      prometheus.Counter
	GCDeletions    prometheus.Counter
	GCFailures     prometheus.Counter
	Conflicts      *prometheus.CounterVec
	Leader         prometheus.Gauge
	Panics         *prometheus.CounterVec
}

// New registers agentd's metrics with reg.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		EventsReceived: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_events_received_total", Help: "Stream events received, by kind.",
		}, []string{"kind"}),
		Applied: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_applies_total", Help: "Resources applied or deleted successfully, by kind and action.",
		}, []string{"kind", "action"}),
		Failed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_apply_failures_total", Help: "Failed applies or deletes (retried with backoff), by kind.",
		}, []string{"kind"}),
		ApplyDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentd_apply_duration_seconds", Help: "Duration of one resource's apply or delete.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"kind"}),
		AckedCursor: f.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_acked_cursor", Help: "Stream version up to which every change is applied.",
		}),
		Lag: f.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_lag_versions", Help: "Stream versions received but not yet all applied (last bookmark received minus acked cursor).",
		}),
		QueueDepth: f.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_queue_depth", Help: "Resources waiting to be applied.",
		}),
		FullSyncs: f.NewCounter(prometheus.CounterOpts{
			Name: "agentd_full_syncs_total", Help: "Full syncs completed, garbage collection of every kind included.",
		}),
		GCDeletions: f.NewCounter(prometheus.CounterOpts{
			Name: "agentd_gc_deletions_total", Help: "Resources deleted because a full sync did not list them.",
		}),
		GCFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "agentd_gc_failures_total", Help: "Full syncs whose garbage collection could not list every kind (collected in part, and the full sync redone).",
		}),
		Conflicts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_conflicts_total", Help: "Applies refused: an object without the managed-by label, one owned by another resource, or a missing CRD is in the way.",
		}, []string{"kind"}),
		Leader: f.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_leader", Help: "1 while this replica holds the region's lease and applies.",
		}),
		Panics: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_panics_total", Help: "Panics recovered, by where: one resource's apply (retried with backoff), a stream (reconnected) or a background loop (started again). The process lived on; each one is a bug, logged with its stack.",
		}, []string{"where"}),
	}
}
