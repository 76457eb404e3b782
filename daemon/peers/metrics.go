package peers

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the package's own: they exist only while peer pokes are on,
// so they are registered by New rather than listed in daemon/metrics.
type metrics struct {
	sent     *prometheus.CounterVec
	received *prometheus.CounterVec
	live     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		sent: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_peer_pokes_sent_total",
			Help: "Pokes sent to other ctrld replicas after a write, by result (ok, error). Writes in a burst share pokes: at most one is in flight per peer, and one waits.",
		}, []string{"result"}),
		received: f.NewCounterVec(prometheus.CounterOpts{
			Name: "deploysync_peer_pokes_received_total",
			Help: "Pokes received from other ctrld replicas, by result: accepted (the tailer polled), or refused (not this replica's secret: a stale row of a restarted replica at this address, or someone guessing).",
		}, []string{"result"}),
		live: f.NewGauge(prometheus.GaugeOpts{
			Name: "deploysync_peers",
			Help: "Other ctrld replicas this one pokes after a write: those on the database with a recent heartbeat.",
		}),
	}
}
