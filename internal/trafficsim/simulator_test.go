package trafficsim

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/deploysync/deploysync/internal/manifest"
	"github.com/deploysync/deploysync/internal/testmetrics"
)

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func simulator(c *clock) (*Simulator, *prometheus.Registry) {
	s := New(Options{Now: c.now})
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	return s, reg
}

// managedPod is a Pod as agentd's StatefulSets make them, Running and Ready
// when ready is set.
func managedPod(uid, deployment, hash, image string, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid), Labels: map[string]string{
			manifest.ManagedByLabel: manifest.ManagedByValue, manifest.DeploymentLabel: deployment, manifest.SpecHashLabel: hash,
		}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func requests(t *testing.T, reg *prometheus.Registry, labels ...string) float64 {
	t.Helper()
	v, _ := testmetrics.Lookup(t, reg, RequestsMetric, labels...)
	return v
}

// An :errors image fails exactly every 5th request with 500; a good one
// none; each ready Pod serves DefaultRate requests a second, counted when
// scraped.
func TestErrorsImageFailsEveryFifthRequest(t *testing.T) {
	c := newClock()
	s, reg := simulator(c)
	s.Observe(managedPod("bad-0", "bad", "h1", "nginx:errors", true))
	s.Observe(managedPod("bad-1", "bad", "h1", "nginx:errors", true))
	s.Observe(managedPod("good-0", "good", "h1", "nginx:1.27", true))

	c.advance(10 * time.Second)
	if got := requests(t, reg, "deployment", "bad", "code", "500"); got != 40 {
		t.Errorf("bad: %g requests failed, want 40 (2 Pods × 100 requests / 5)", got)
	}
	if got := requests(t, reg, "deployment", "bad", "code", "200"); got != 160 {
		t.Errorf("bad: %g requests succeeded, want 160", got)
	}
	if got, found := testmetrics.Lookup(t, reg, RequestsMetric, "deployment", "good", "code", "500"); got != 0 || !found {
		t.Errorf("good: 500 series %g (found %v), want it present at 0 so an error ratio is 0, not missing", got, found)
	}
	if got := requests(t, reg, "deployment", "good", "code", "200", "namespace", "ns", "spec_hash", "h1"); got != 100 {
		t.Errorf("good: %g requests succeeded, want 100", got)
	}
	// A part of a second counts the whole requests in it: 3 more per
	// Pod, none failed (the 105th is the next to fail)...
	c.advance(350 * time.Millisecond)
	if total, failed := requests(t, reg, "deployment", "bad"), requests(t, reg, "deployment", "bad", "code", "500"); total != 206 || failed != 40 {
		t.Errorf("bad after 10.35 s: %g requests, %g failed; want 206, 40", total, failed)
	}
	// ... and after 0.2 s more, the 104th and the 105th, which fails.
	c.advance(200 * time.Millisecond)
	if total, failed := requests(t, reg, "deployment", "bad"), requests(t, reg, "deployment", "bad", "code", "500"); total != 210 || failed != 42 {
		t.Errorf("bad after 10.55 s: %g requests, %g failed; want 210, 42", total, failed)
	}
}

// A :slow image's requests take 2 s each, a good image's 50 ms.
func TestSlowImageTakesTwoSeconds(t *testing.T) {
	c := newClock()
	s, reg := simulator(c)
	s.Observe(managedPod("slow-0", "slow", "h", "registry.example:5000/nginx:slow", true))
	s.Observe(managedPod("good-0", "good", "h", "nginx", true))
	c.advance(5 * time.Second)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"slow": 2, "good": 0.05}
	for _, f := range families {
		if f.GetName() != DurationMetric {
			continue
		}
		if !strings.Contains(f.GetHelp(), "SIMULATED") {
			t.Errorf("%s's help does not say it is simulated: %q", DurationMetric, f.GetHelp())
		}
		for _, m := range f.GetMetric() {
			var deployment string
			for _, l := range m.GetLabel() {
				if l.GetName() == "deployment" {
					deployment = l.GetValue()
				}
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != 50 {
				t.Errorf("%s: %d requests timed, want 50", deployment, h.GetSampleCount())
			}
			if mean := h.GetSampleSum() / float64(h.GetSampleCount()); mean < want[deployment]*0.999 || mean > want[deployment]*1.001 {
				t.Errorf("%s: mean %g s, want %g s", deployment, mean, want[deployment])
			}
			delete(want, deployment)
		}
	}
	if len(want) > 0 {
		t.Errorf("no histogram for %v", want)
	}
}

// Only a Running and Ready Pod serves: counting starts when it becomes
// ready and stops when it is not, and resumes where it left off.
func TestOnlyReadyPodsServe(t *testing.T) {
	c := newClock()
	s, reg := simulator(c)
	s.Observe(managedPod("p", "d", "h", "nginx:errors", false))
	c.advance(3 * time.Second)
	if got := requests(t, reg, "deployment", "d"); got != 0 {
		t.Fatalf("%g requests to a Pod that is not ready, want 0", got)
	}
	s.Observe(managedPod("p", "d", "h", "nginx:errors", true))
	c.advance(2 * time.Second)
	s.Observe(managedPod("p", "d", "h", "nginx:errors", false))
	c.advance(time.Hour)
	if got := requests(t, reg, "deployment", "d"); got != 20 {
		t.Fatalf("%g requests after 2 s ready and an hour not, want 20", got)
	}
	terminating := managedPod("p", "d", "h", "nginx:errors", true)
	terminating.DeletionTimestamp = &metav1.Time{Time: c.now()}
	s.Observe(terminating)
	c.advance(time.Second)
	if got := requests(t, reg, "deployment", "d"); got != 20 {
		t.Fatalf("%g requests after a second terminating, want still 20", got)
	}
	s.Observe(managedPod("p", "d", "h", "nginx:errors", true))
	c.advance(1500 * time.Millisecond)
	// 35 requests in all: the 5th, 10th, … 35th failed, across the pause.
	if got := requests(t, reg, "deployment", "d", "code", "500"); got != 7 {
		t.Errorf("%g failed of 35, want 7", got)
	}
	s.Observe(managedPod("unlabelled", "", "", "nginx", true))
	c.advance(time.Second)
	if got := requests(t, reg); got != 45 {
		t.Errorf("%g requests in all, want 45: a Pod without a deployment ID gets none", got)
	}
}

// The two revisions of a rolling update are counted apart (spec_hash),
// and a series goes from /metrics with the last Pod in it, its requests
// up to then counted.
func TestSeriesFollowThePods(t *testing.T) {
	c := newClock()
	s, reg := simulator(c)
	s.Observe(managedPod("old-0", "d", "h1", "nginx:1", true))
	s.Observe(managedPod("old-1", "d", "h1", "nginx:1", true))
	s.Observe(managedPod("new-0", "d", "h2", "nginx:errors", true))
	c.advance(time.Second)
	if old, updated := requests(t, reg, "spec_hash", "h1", "code", "500"), requests(t, reg, "spec_hash", "h2", "code", "500"); old != 0 || updated != 2 {
		t.Errorf("500s: old revision %g, new %g; want 0 and 2", old, updated)
	}
	s.Forget("old-0")
	c.advance(time.Second)
	if got := requests(t, reg, "spec_hash", "h1"); got != 30 {
		t.Errorf("old revision: %g requests, want 30 (2 Pods for 1 s, then 1)", got)
	}
	s.Forget("old-1")
	if _, found := testmetrics.Lookup(t, reg, RequestsMetric, "spec_hash", "h1"); found {
		t.Errorf("the old revision's series outlived its last Pod")
	}
	if _, found := testmetrics.Lookup(t, reg, DurationMetric, "spec_hash", "h1"); found {
		t.Errorf("the old revision's histogram outlived its last Pod")
	}
	if got := requests(t, reg, "spec_hash", "h2"); got != 20 {
		t.Errorf("new revision: %g requests, want 20", got)
	}
	s.Forget("never-seen") // nothing to do
}

func TestBehaviourComesFromTheImageTag(t *testing.T) {
	for _, tc := range []struct {
		image, tag string
		failEvery  int64
		latency    time.Duration
	}{
		{"nginx:errors", "errors", 5, 50 * time.Millisecond},
		{"nginx:slow", "slow", 0, 2 * time.Second},
		{"registry.example:5000/team/nginx:errors", "errors", 5, 50 * time.Millisecond},
		{"nginx:errors@sha256:0123abcd", "errors", 5, 50 * time.Millisecond},
		{"nginx:1.27", "1.27", 0, 50 * time.Millisecond},
		{"nginx", "", 0, 50 * time.Millisecond},
		{"registry.example:5000/nginx", "", 0, 50 * time.Millisecond},
		{"nginx@sha256:0123abcd", "", 0, 50 * time.Millisecond},
		{"nginx:ERRORS", "ERRORS", 0, 50 * time.Millisecond}, // tags are case-sensitive
		{"", "", 0, 50 * time.Millisecond},
	} {
		b := BehaviourOf(tc.image)
		if got := Tag(tc.image); got != tc.tag || b.FailEvery != tc.failEvery || b.Latency != tc.latency {
			t.Errorf("%q: tag %q, %+v; want tag %q, fail every %d, latency %s", tc.image, got, b, tc.tag, tc.failEvery, tc.latency)
		}
	}
	if got := BehaviourOf("nginx:errors").ErrorFraction(); got != 0.2 {
		t.Errorf(":errors fails %g of requests, want 0.2", got)
	}
}
