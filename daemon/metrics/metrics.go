package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// sameOnEveryReplica ends the help of the region gauges, which every
// replica computes from the same database (package regionhealth): summed
// across replicas they would count each region once per replica.
const sameOnEveryReplicaTotal = "Computed from the database by every ctrld replica alike: aggregate with max."

const sameOnEveryReplica = "Computed from the database every few seconds by every ctrld replica alike: aggregate with max by (region)."

// Metrics are ctrld's metrics. Create one set per process with New.
type Metrics struct {
	PollDuration     prometheus.Histogram
	PollRows         prometheus.Counter
	Watermark        prometheus.Gauge
	OpenHoles        prometheus.Gauge
	WatermarkHolds   prometheus.Counter
	FillerRuns       *prometheus.CounterVec
	Streams          *prometheus.GaugeVec
	EventsSent       *prometheus.CounterVec
	StreamLag        *prometheus.GaugeVec
	RegionLagSeconds *prometheus.GaugeVec
	AgentConnected   *prometheus.GaugeVec
	HeartbeatAge     *prometheus.GaugeVec
	FullSyncAge      *prometheus.GaugeVec
	RegionPaused     *prometheus.GaugeVec
	FailingResources *prometheus.GaugeVec
	FullSyncs        *prometheus.CounterVec
	FullSyncsWaiting prometheus.Gauge
	SlowSubscribers  prometheus.Counter
	StalledStreams   *prometheus.CounterVec
	StreamsRefused   *prometheus.CounterVec
	Subscriptions    prometheus.Gauge
	CleanupRows      prometheus.Counter
	CleanupRuns      *prometheus.CounterVec
	AgentsPruned     prometheus.Counter
	WorkflowsDecided *prometheus.CounterVec
	Panics           *prometheus.CounterVec
	Rollouts         *prometheus.GaugeVec
	GateFailures     prometheus.Counter
	// ChecksWithoutVerdict counts the regions whose bake is over but a
	// rollout check of which has no verdict yet.
	ChecksWithoutVerdict prometheus.Gauge
	RolloutHalts         *prometheus.CounterVec
	// RolloutsHeld counts the rollouts in flight a fleet control holds,
	// by kind (halt, freeze, pacing); FleetHalts the halts that stand and
	// FreezeWindowsClosed the freeze windows closed now.
	RolloutsHeld        *prometheus.GaugeVec
	FleetHalts          prometheus.Gauge
	FreezeWindowsClosed prometheus.Gauge
}

// New registers ctrld's metrics with reg (a fresh prometheus.NewRegistry()
// in tests).
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		PollDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name: "deploysync_tailer_poll_duration_seconds", Help: "Duration of one poll of deployment_changes.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		PollRows: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_tailer_rows_total", Help: "Change rows read by the tailer.",
		}),
		Watermark: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_tailer_watermark", Help: "Safe watermark: every change at or below it is committed or dead.",
		}),
		OpenHoles: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_tailer_open_holes", Help: "Change pks below the newest seen that are neither committed nor settled yet.",
		}),
		WatermarkHolds: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_tailer_watermark_holds_total", Help: "Polls after which the watermark was held below the newest change by an open hole.",
		}),
		FillerRuns: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_tailer_filler_runs_total", Help: "Filler inserts that settle holes, by result.",
		}, []string{"result"}),
		Streams: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_streams", Help: "Open WatchDeploymentChanges streams.",
		}, []string{"region"}),
		EventsSent: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_stream_events_sent_total", Help: "Events sent to agents, by region and kind.",
		}, []string{"region", "kind"}),
		StreamLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_stream_lag_changes", Help: "Changes for the region above the acked cursor of the agent that speaks for it (all of them without an agent), paused and disconnected regions included; the console's lag. " + sameOnEveryReplica,
		}, []string{"region"}),
		RegionLagSeconds: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_lag_seconds", Help: "Age of the region's oldest change its agent has not acked; 0 when none waits. " + sameOnEveryReplica,
		}, []string{"region"}),
		AgentConnected: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_agent_connected", Help: "1 while the region's agent holds a stream and heartbeats (within 30s), else 0 (no agent at all included). " + sameOnEveryReplica,
		}, []string{"region"}),
		HeartbeatAge: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_heartbeat_age_seconds", Help: "Seconds since the region's agent last reported; absent for a region no agent ever reported for. " + sameOnEveryReplica,
		}, []string{"region"}),
		FullSyncAge: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_full_sync_age_seconds", Help: "Seconds since the region's agent last completed a full sync (agents redo one every 5m by default); absent until its first. " + sameOnEveryReplica,
		}, []string{"region"}),
		RegionPaused: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_paused", Help: "1 while an operator has paused the region's stream, else 0. " + sameOnEveryReplica,
		}, []string{"region"}),
		FailingResources: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_region_failing_resources", Help: "Resources of the region whose applies its agent reports failing (the console's region detail names them). " + sameOnEveryReplica,
		}, []string{"region"}),
		FullSyncs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_stream_full_syncs_total", Help: "Full syncs served, by region.",
		}, []string{"region"}),
		FullSyncsWaiting: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_stream_full_syncs_waiting", Help: "Streams waiting for one of the full sync slots (stream.Config.MaxFullSyncs).",
		}),
		Subscriptions: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_tailer_subscriptions", Help: "Subscriptions the tailer delivers to (one per stream; more means leaked ones).",
		}),
		SlowSubscribers: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_stream_slow_subscribers_total", Help: "Streams ended because they fell too far behind the tailer.",
		}),
		StalledStreams: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_stream_stalled_total", Help: "Streams ended because their client read nothing for the send timeout while events waited for it.",
		}, []string{"region"}),
		StreamsRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_streams_refused_total", Help: "Streams refused with ResourceExhausted, by the limit they would have exceeded (per_token, total).",
		}, []string{"limit"}),
		CleanupRows: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_cleanup_rows_deleted_total", Help: "deployment_changes rows deleted by retention.",
		}),
		CleanupRuns: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_cleanup_runs_total", Help: "Retention runs, by result (done, locked elsewhere, error), and runs that went on after tidying up failed (tidy_error).",
		}, []string{"result"}),
		AgentsPruned: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_cleanup_agents_deleted_total", Help: "Agent records deleted by retention because nothing was heard of their agent for the agent TTL.",
		}),
		WorkflowsDecided: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_deploy_workflows_total", Help: "Deploy workflows that reached a final status.",
		}, []string{"status"}),
		Rollouts: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_rollouts",
			Help: "Rollouts in flight by state (queued, progressing, paused, halted). " + sameOnEveryReplicaTotal,
		}, []string{"state"}),
		RolloutsHeld: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "deploysync_rollouts_held",
			Help: "Rollouts in flight a fleet control holds from starting a wave, by kind: halt (paused by one, or queued behind one), freeze (a freeze window is closed) or pacing (queued behind a bound). " + sameOnEveryReplicaTotal,
		}, []string{"kind"}),
		FleetHalts: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_fleet_halts",
			Help: "Fleet halts that stand (not lifted). " + sameOnEveryReplicaTotal,
		}),
		FreezeWindowsClosed: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_freeze_windows_closed",
			Help: "Freeze windows closed now. " + sameOnEveryReplicaTotal,
		}),
		ChecksWithoutVerdict: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_rollout_regions_without_verdict",
			Help: "Regions of progressing rollouts whose bake is over but a check of which has no verdict (no data, too few samples, an unreachable Prometheus): each holds its wave until its deadline fails it. " + sameOnEveryReplicaTotal,
		}),
		GateFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "deploysync_rollout_gate_failures_total",
			Help: "Regions that failed a rollout's health gate (crash loop, image pull, apply failure, deadline). Counted by the replica that wrote the step: sum across replicas.",
		}),
		RolloutHalts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_rollout_halts_total",
			Help: "Rollouts a failed wave halted, by what followed: rollback (automatic) or pause (held for an operator). Counted by the replica that wrote the step: sum across replicas.",
		}, []string{"on_failure"}),
		Panics: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_panics_total", Help: "Panics recovered, by where: a gRPC method (the call ended with Internal) or a background loop (started again). The process lived on; each one is a bug, logged with its stack.",
		}, []string{"where"}),
	}
}
