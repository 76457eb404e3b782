package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/eventually"
)

// Sample is one series of an instant query's result: its labels and its
// value (NaN and ±Inf as Prometheus gives them).
type Sample struct {
	Metric map[string]string
	Value  float64
}

func (s Sample) String() string {
	return fmt.Sprintf("%v => %g", s.Metric, s.Value)
}

// queryClient bounds each query: a server killed mid-answer must not
// hang the test that asked.
var queryClient = &http.Client{Timeout: 10 * time.Second}

// Query evaluates expr at the current time through the HTTP API
// (/api/v1/query), as any client of Prometheus does, and returns its
// vector's samples; a scalar comes back as one sample without labels. It
// fails while the server is stopped, and on an expression Prometheus
// refuses, with Prometheus' own message.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/api/v1/query?"+url.Values{"query": {expr}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := queryClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %s, and its body: %w", expr, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s: %s: %s", expr, resp.Status, body.ErrorType, body.Error)
	}
	return decodeResult(body.Data.ResultType, body.Data.Result)
}

// decodeResult reads the result of an instant query: a vector, or a
// scalar. A matrix (a bare range selector) is refused: wrap it in a
// function such as rate.
func decodeResult(kind string, result json.RawMessage) ([]Sample, error) {
	switch kind {
	case "vector":
		var series []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(result, &series); err != nil {
			return nil, fmt.Errorf("decode vector: %w", err)
		}
		samples := make([]Sample, 0, len(series))
		for _, s := range series {
			v, err := sampleValue(s.Value)
			if err != nil {
				return nil, err
			}
			samples = append(samples, Sample{Metric: s.Metric, Value: v})
		}
		return samples, nil
	case "scalar":
		var point [2]any
		if err := json.Unmarshal(result, &point); err != nil {
			return nil, fmt.Errorf("decode scalar: %w", err)
		}
		v, err := sampleValue(point)
		if err != nil {
			return nil, err
		}
		return []Sample{{Metric: map[string]string{}, Value: v}}, nil
	}
	return nil, fmt.Errorf("result of type %q: want a vector or a scalar (wrap a range selector in a function)", kind)
}

// sampleValue reads the value of a [time, "value"] pair: Prometheus sends
// it as a string, so that NaN and the infinities survive JSON.
func sampleValue(point [2]any) (float64, error) {
	text, ok := point[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is no string", point[1])
	}
	return strconv.ParseFloat(text, 64)
}

// Single is the value of a result that has exactly one sample, for the
// usual query that sums or divides down to one number.
func Single(samples []Sample) (float64, error) {
	if len(samples) != 1 {
		return 0, fmt.Errorf("%d samples, want exactly one: %v", len(samples), samples)
	}
	return samples[0].Value, nil
}

// WaitFor evaluates expr until accept takes its result (returns nil), and
// returns that result; it fails t after within, through internal/eventually
// (the tests' one way to wait). Each new way the answer falls short (what
// accept said, or the query's error) is logged as it comes, so a failure
// shows how the answers went, and the end of Prometheus' log. Prefer it to sleeping: scrapes and rule
// evaluations land when they land.
func (s *Server) WaitFor(t testing.TB, within time.Duration, expr string, accept func([]Sample) error) []Sample {
	t.Helper()
	var got []Sample
	var last string
	// Registered after Close (StartForTest's), so it runs first: the log
	// is still there when the wait failed the test.
	t.Cleanup(func() {
		if got == nil && t.Failed() {
			t.Logf("promtest: the end of Prometheus' log:\n%s", s.LogTail())
		}
	})
	eventually.True(t, within, fmt.Sprintf("promtest: %s: no answer as wanted (the answers are logged above)", expr), func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		samples, err := s.Query(ctx, expr)
		if err == nil {
			if err = accept(samples); err == nil {
				got = samples
				return true
			}
		}
		if err.Error() != last {
			last = err.Error()
			t.Logf("promtest: %s: %s", expr, last)
		}
		return false
	})
	return got
}
