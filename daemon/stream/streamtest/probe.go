package streamtest

import (
	"slices"
	"testing"
	"time"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Probe times, for a latency benchmark, how long after an operator's write
// a follower receives it: the benchmark scales one deployment to a new
// replica count, and the probe waits for that count to arrive. Its figures
// are reported as <name>p50-ms, <name>p99-ms and <name>unseen-10s.
type Probe struct {
	name      string
	arrived   chan arrival
	latencies []time.Duration
	lost      int
}

// arrival is a replica count as the follower received it, and when.
type arrival struct {
	replicas int32
	at       time.Time
}

// NewProbe watches f for events of deploymentID; it takes f's event hook.
func NewProbe(name string, f *Follower, deploymentID string) *Probe {
	p := &Probe{name: name, arrived: make(chan arrival, 1)}
	f.OnEvent(func(ev *ctrlv1.DeploymentChangeEvent, at time.Time) {
		if d := ev.GetDeployment().GetDeployment(); d.GetDeploymentId() == deploymentID {
			select {
			case p.arrived <- arrival{d.GetReplicas(), at}:
			default: // one the probe no longer waits for
			}
		}
	})
	return p
}

// Drain forgets what arrived before the next write.
func (p *Probe) Drain() {
	for {
		select {
		case <-p.arrived:
		default:
			return
		}
	}
}

// Await records how long after start the follower received want (its
// arrival time, whichever probe is awaited first), or that it did not by
// deadline: a change not seen counts as unseen, not as a latency.
func (p *Probe) Await(want int32, start, deadline time.Time) {
	timeout := time.After(time.Until(deadline))
	for {
		select {
		case got := <-p.arrived:
			if got.replicas == want {
				p.latencies = append(p.latencies, got.at.Sub(start))
				return
			}
		case <-timeout:
			p.lost++
			return
		}
	}
}

// Report reports the probe's figures on b.
func (p *Probe) Report(b *testing.B) {
	b.ReportMetric(float64(p.lost), p.name+"unseen-10s")
	if len(p.latencies) == 0 {
		return
	}
	slices.Sort(p.latencies)
	pct := func(q float64) float64 {
		return float64(p.latencies[min(len(p.latencies)-1, int(q*float64(len(p.latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), p.name+"p50-ms")
	b.ReportMetric(pct(0.99), p.name+"p99-ms")
}
