package testmetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Lookup sums metric name's series whose labels include every name, value
// pair in labels: a counter's or gauge's value, a histogram's sample
// count. found is false when no series matches (the metric is not
// registered, or has no such series yet).
func Lookup(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (value float64, found bool) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("testmetrics: labels come in name, value pairs: %q", labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if has(m, labels) {
				value += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
				found = true
			}
		}
	}
	return value, found
}

// Value is Lookup's value, failing t where no series matches: for a metric
// the test reads as 0 only if it is there to say so.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, found := Lookup(t, g, name, labels...)
	if !found {
		t.Fatalf("metric %s%q has no series", name, labels)
	}
	return v
}

// Sum is Lookup's value: 0 where no series matches.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, _ := Lookup(t, g, name, labels...)
	return v
}

// has reports whether m carries every name, value pair in labels.
func has(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		ok := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
