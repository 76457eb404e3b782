package trafficsim

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/deploysync/deploysync/internal/manifest"
)

// The simulated metrics' names.
const (
	RequestsMetric = "deploysync_sim_requests_total"
	DurationMetric = "deploysync_sim_request_duration_seconds"
)

// DefaultRate is the simulated requests per second of each ready Pod.
const DefaultRate = 10

// DurationBuckets are the duration histogram's upper bounds, in seconds:
// 50 ms (a healthy image) and 2 s (a slow one) each land well inside.
var DurationBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// appContainer is the container internal/manifest gives a deployment's
// Pods; a Pod without one is judged by its first container.
const appContainer = "app"

// Options tunes a Simulator.
type Options struct {
	// RequestsPerSecond is each ready Pod's request rate; DefaultRate
	// when 0.
	RequestsPerSecond float64
	// Now is the clock; time.Now when nil (tests pass their own).
	Now func() time.Time
}

// Simulator counts simulated requests for the Pods it is told of. It is a
// prometheus.Collector: register it, and every scrape first counts the
// requests served up to that moment.
type Simulator struct {
	rate      float64
	now       func() time.Time
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec

	mu   sync.Mutex
	pods map[types.UID]*pod
}

// series is what a Pod's requests are counted under.
type series struct {
	namespace, deployment, specHash string
}

// pod is one Pod's simulated traffic so far.
type pod struct {
	series    series
	behaviour Behaviour
	serving   bool      // Running and Ready when last seen
	since     time.Time // when the current serving stretch began
	before    int64     // requests served in earlier stretches
	counted   int64     // requests already in the metrics
}

// New makes a Simulator that knows of no Pod yet.
func New(opts Options) *Simulator {
	rate := opts.RequestsPerSecond
	if rate == 0 {
		rate = DefaultRate
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Simulator{
		rate: rate,
		now:  now,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RequestsMetric,
			Help: "SIMULATED requests to the Pods of deployments agentd manages, by status code (200 or 500): " +
				"trafficsim stands in for the application, since kwok's Pods run no code. " +
				"An image tagged :errors fails every 5th request.",
		}, []string{"namespace", "deployment", "spec_hash", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: DurationMetric,
			Help: "How long SIMULATED requests to the Pods of deployments agentd manages took: " +
				"trafficsim stands in for the application, since kwok's Pods run no code. " +
				"An image tagged :slow takes 2 s, any other 50 ms.",
			Buckets: DurationBuckets,
		}, []string{"namespace", "deployment", "spec_hash"}),
		pods: map[types.UID]*pod{},
	}
}

// Describe implements prometheus.Collector.
func (s *Simulator) Describe(ch chan<- *prometheus.Desc) {
	s.requests.Describe(ch)
	s.durations.Describe(ch)
}

// Collect implements prometheus.Collector: it counts the requests every
// Pod served up to now, then reports.
func (s *Simulator) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	s.mu.Lock()
	for _, p := range s.pods {
		s.count(p, now)
	}
	s.mu.Unlock()
	s.requests.Collect(ch)
	s.durations.Collect(ch)
}

// Observe tells the simulator a Pod's current state, as the API server
// has it: it serves from now while it is Running and Ready, and its image
// says how it answers. A Pod without the deployment ID label is ignored.
func (s *Simulator) Observe(kubePod *corev1.Pod) {
	deployment := kubePod.Labels[manifest.DeploymentLabel]
	if deployment == "" {
		return
	}
	now := s.now()
	key := series{namespace: kubePod.Namespace, deployment: deployment, specHash: kubePod.Labels[manifest.SpecHashLabel]}
	behaviour := BehaviourOf(image(kubePod))
	serving := servesTraffic(kubePod)

	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[kubePod.UID]
	if p != nil && (p.series != key || p.behaviour != behaviour) {
		// Relabelled or given another image in place: what it served so
		// far stays where it was counted, and it starts afresh.
		s.forget(kubePod.UID, now)
		p = nil
	}
	if p == nil {
		p = &pod{series: key, behaviour: behaviour}
		s.pods[kubePod.UID] = p
		s.initSeries(key)
	}
	switch {
	case serving && !p.serving:
		p.serving, p.since = true, now
	case !serving && p.serving:
		s.count(p, now)
		p.serving, p.before = false, p.counted
	}
}

// Forget tells the simulator a Pod is gone. Its requests up to now are
// counted; once no Pod is left in its series, the series goes too (as a
// deleted Pod's metrics go from a real scrape).
func (s *Simulator) Forget(uid types.UID) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(uid, now)
}

func (s *Simulator) forget(uid types.UID, now time.Time) {
	p := s.pods[uid]
	if p == nil {
		return
	}
	s.count(p, now)
	delete(s.pods, uid)
	for _, other := range s.pods {
		if other.series == p.series {
			return
		}
	}
	k := p.series
	for _, code := range []int{200, 500} {
		s.requests.DeleteLabelValues(k.namespace, k.deployment, k.specHash, strconv.Itoa(code))
	}
	s.durations.DeleteLabelValues(k.namespace, k.deployment, k.specHash)
}

// initSeries makes both codes' counters exist at 0, so that an error
// ratio is 0 for a deployment that never failed, not missing.
func (s *Simulator) initSeries(k series) {
	for _, code := range []int{200, 500} {
		s.requests.WithLabelValues(k.namespace, k.deployment, k.specHash, strconv.Itoa(code)).Add(0)
	}
	s.durations.WithLabelValues(k.namespace, k.deployment, k.specHash)
}

// count adds to the metrics the requests p served up to now that are not
// in them yet: time serving times the rate, rounded down.
func (s *Simulator) count(p *pod, now time.Time) {
	if !p.serving {
		return
	}
	// Nanoseconds times the rate, then one division: exact for a whole
	// rate, where Seconds()*rate may land a hair under a whole number.
	served := p.before + int64(math.Floor(float64(now.Sub(p.since))*s.rate/float64(time.Second)))
	n := served - p.counted
	if n <= 0 {
		return
	}
	k := p.series
	failed := p.behaviour.failures(served) - p.behaviour.failures(p.counted)
	s.requests.WithLabelValues(k.namespace, k.deployment, k.specHash, "200").Add(float64(n - failed))
	s.requests.WithLabelValues(k.namespace, k.deployment, k.specHash, "500").Add(float64(failed))
	latency := s.durations.WithLabelValues(k.namespace, k.deployment, k.specHash)
	for range n {
		latency.Observe(p.behaviour.Latency.Seconds())
	}
	p.counted = served
}

// servesTraffic reports whether a Pod would get requests: Running, Ready
// and not being deleted.
func servesTraffic(kubePod *corev1.Pod) bool {
	if kubePod.Status.Phase != corev1.PodRunning || kubePod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range kubePod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// image is the image the Pod's application container runs, as its spec
// says.
func image(kubePod *corev1.Pod) string {
	for _, c := range kubePod.Spec.Containers {
		if c.Name == appContainer {
			return c.Image
		}
	}
	if len(kubePod.Spec.Containers) > 0 {
		return kubePod.Spec.Containers[0].Image
	}
	return ""
}
