package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
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

// pollEvery is how often WaitFor asks: a quarter of the scrape interval,
// so a new scrape shows within a few hundred milliseconds.
const pollEvery = Interval / 4

// WaitFor evaluates expr every pollEvery until accept takes its result
// (returns nil), and returns that result. After within it fails t with
// what accept said of the last result (or the query's error) and the end
// of the server's log. Prefer it to sleeping: scrapes and rule
// evaluations land when they land.
func (s *Server) WaitFor(t testing.TB, within time.Duration, expr string, accept func([]Sample) error) []Sample {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		samples, err := s.Query(ctx, expr)
		cancel()
		if err == nil {
			if err = accept(samples); err == nil {
				return samples
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: %s: not as wanted within %s: %v\nthe end of Prometheus' log:\n%s", expr, within, err, indent(s.LogTail()))
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("promtest: %s: the test ended while waiting: %v", expr, errors.Join(err, t.Context().Err()))
		case <-time.After(pollEvery):
		}
	}
}

func indent(text string) string {
	return "  " + strings.ReplaceAll(text, "\n", "\n  ")
}
