package checks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Config tunes the runner. Zero fields take the defaults.
type Config struct {
	// PrometheusURL is the region's Prometheus. Empty: every check is
	// reported without an answer, saying so (it never passes).
	PrometheusURL string
	// Timeout bounds one query (5s).
	Timeout time.Duration
	// Concurrency bounds the queries in flight at once (4).
	Concurrency int
	// SyncInterval is how often the runner calls ctrld (2s).
	SyncInterval time.Duration
}

// Bounds of what one query may cost the agent.
const (
	// maxResponseBytes bounds one answer read from Prometheus: a check's
	// query returns one sample, and a query that returns a million series
	// must not make the agent read them.
	maxResponseBytes = 256 << 10
	// maxPending bounds the results kept for ctrld while it is away; the
	// oldest go first.
	maxPending = 256
	maxError   = 1024
)

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 2 * time.Second
	}
}

// Runner evaluates the checks ctrld assigns the region.
type Runner struct {
	client ctrlv1.ClusterServiceClient
	region string
	cfg    Config
	log    *slog.Logger
	prom   promv1.API // nil without a Prometheus

	// due carries assignments to the Concurrency workers; kick asks the
	// sync loop to send results now (coalesced).
	due  chan *ctrlv1.CheckAssignment
	kick chan struct{}

	mu       sync.Mutex
	assigned []*ctrlv1.CheckAssignment // as of the last call
	pending  []*ctrlv1.CheckResult
	// last is when each assignment was last queued; one with a fixed
	// instant (at) runs once. queued ones are waiting or running.
	last   map[string]time.Time
	queued map[string]bool
}

// Bounds of the runner's loops.
const (
	// schedule is how often due assignments are looked for: intervals
	// are whole seconds, so a quarter second late at most.
	schedule = 250 * time.Millisecond
	// minSyncGap spaces calls to ctrld that results brought forward: a
	// region with hundreds of checks sends them a few times a second at
	// most, not a call each.
	minSyncGap = 500 * time.Millisecond
	// maxQueued bounds the assignments waiting for a worker.
	maxQueued = 1024
)

// New returns a runner for region, calling ctrld through client.
func New(client ctrlv1.ClusterServiceClient, region string, cfg Config, log *slog.Logger) (*Runner, error) {
	cfg.defaults()
	r := &Runner{client: client, region: region, cfg: cfg, log: log,
		due: make(chan *ctrlv1.CheckAssignment, maxQueued), kick: make(chan struct{}, 1),
		last: map[string]time.Time{}, queued: map[string]bool{}}
	if cfg.PrometheusURL != "" {
		u, err := url.Parse(cfg.PrometheusURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--prometheus-url: want http(s)://host:port[/path], got %q", cfg.PrometheusURL)
		}
		c, err := api.NewClient(api.Config{Address: cfg.PrometheusURL, RoundTripper: bounded{http.DefaultTransport}})
		if err != nil {
			return nil, fmt.Errorf("--prometheus-url: %w", err)
		}
		r.prom = promv1.NewAPI(c)
	}
	return r, nil
}

// Run evaluates what is due and syncs with ctrld until ctx ends: every
// SyncInterval, and sooner (minSyncGap apart) when results are waiting.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range r.cfg.Concurrency {
		wg.Go(func() { r.work(ctx) })
	}
	wg.Go(func() { r.scheduleDue(ctx) })
	tick := time.NewTicker(r.cfg.SyncInterval)
	defer tick.Stop()
	for {
		r.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.kick:
			select { // spaced, and a tick meanwhile is this call
			case <-ctx.Done():
				return
			case <-time.After(minSyncGap):
			}
		}
	}
}

// sync sends the results gathered since the last call and takes what
// ctrld answers as the assignments. Results a failed call carried are
// kept for the next.
func (r *Runner) sync(ctx context.Context) {
	r.mu.Lock()
	results := r.pending
	r.pending = nil
	r.mu.Unlock()
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := r.client.SyncChecks(callCtx, &ctrlv1.SyncChecksRequest{Region: r.region, Results: results})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("checks: syncing with ctrld failed", "err", err)
		}
		r.keep(results...)
		return
	}
	ids := map[string]bool{}
	for _, a := range resp.GetChecks() {
		ids[a.GetId()] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.assigned = resp.GetChecks()
	for id := range r.last {
		if !ids[id] {
			delete(r.last, id)
		}
	}
}

// scheduleDue queues the assignments that are due, every schedule.
func (r *Runner) scheduleDue(ctx context.Context) {
	tick := time.NewTicker(schedule)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		r.mu.Lock()
		for _, a := range r.assigned {
			id := a.GetId()
			last, ran := r.last[id]
			switch {
			case r.queued[id]:
			case a.GetAt() != nil && ran:
			case ran && now.Sub(last) < a.GetInterval().AsDuration():
			default:
				select {
				case r.due <- a:
					r.last[id], r.queued[id] = now, true
				default: // the workers are behind: a later round queues it
				}
			}
		}
		r.mu.Unlock()
	}
}

// work evaluates queued assignments, one at a time, until ctx ends.
func (r *Runner) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-r.due:
			res := r.evaluate(ctx, a)
			r.mu.Lock()
			delete(r.queued, a.GetId())
			r.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			r.pending = append(r.pending, res)
			if n := len(r.pending); n > maxPending {
				r.pending = r.pending[n-maxPending:]
			}
			r.mu.Unlock()
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
}

// keep puts back the results of a call that failed, before any that
// came in since.
func (r *Runner) keep(results ...*ctrlv1.CheckResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(results, r.pending...)
	if n := len(r.pending); n > maxPending {
		r.pending = r.pending[n-maxPending:]
	}
}

// evaluate runs a's query once.
func (r *Runner) evaluate(ctx context.Context, a *ctrlv1.CheckAssignment) *ctrlv1.CheckResult {
	res := &ctrlv1.CheckResult{Id: a.GetId()}
	if r.prom == nil {
		res.Error = "agentd has no --prometheus-url: the region's checks cannot be evaluated"
		return res
	}
	at := time.Now()
	if a.GetAt() != nil {
		at = a.GetAt().AsTime()
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	v, _, _, err := r.prom.Query(ctx, a.GetQuery(), at, promv1.WithTimeout(r.cfg.Timeout))
	if err != nil {
		res.Error = clip("prometheus: " + err.Error())
		return res
	}
	switch v := v.(type) {
	case *model.Scalar:
		res.HasValue, res.Value = true, float64(v.Value)
	case model.Vector:
		switch len(v) {
		case 0:
		case 1:
			res.HasValue, res.Value = true, float64(v[0].Value)
		default:
			res.Error = fmt.Sprintf("the query returned %d series; a check's query must return one sample (aggregate it: sum, max)", len(v))
		}
	default:
		res.Error = fmt.Sprintf("the query returned a %s; a check's query must return one sample", v.Type())
	}
	return res
}

func clip(s string) string { return validate.Text(s, maxError) }

// bounded refuses answers larger than maxResponseBytes.
type bounded struct{ next http.RoundTripper }

func (b bounded) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{r: io.LimitReader(resp.Body, maxResponseBytes+1), c: resp.Body}
	return resp, nil
}

var errTooLarge = errors.New("the answer is larger than 256 KiB; a check's query must return one sample")

type limitedBody struct {
	r    io.Reader
	c    io.Closer
	read int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.read += int64(n)
	if l.read > maxResponseBytes {
		return n, errTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.c.Close() }
