package watch_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/watch"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// An agent that connects to a paused region is connected: ctrld sends it
// nothing until the region is resumed, and that silence is not a failed
// connection. The stream's earlier error is cleared, and the agent waits
// for its first full sync instead of saying it is not streaming (which
// would keep it unready, and its last error on the console, for the whole
// pause).
func TestAnAgentOfAPausedRegionIsConnected(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	agent := env.Agent("eu")
	if _, err := env.Operator("alice").SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(&deletions{keys: map[dispatch.Key]bool{}}, slog.New(slog.DiscardHandler), nil)
	w := watch.New(agent, d, func() ([]dispatch.Key, error) { return nil, nil },
		watch.Config{Region: "eu", Identity: "krane-0", BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx, 1) }()
	go func() { defer wg.Done(); w.Run(ctx) }()

	eventually.True(t, 10*time.Second, "the watcher streams from the paused region", func() bool {
		err := w.Ready()
		return err != nil && strings.Contains(err.Error(), "first full sync in progress")
	})
	if err := w.LastError(); err != nil {
		t.Errorf("connected to a paused region, yet the last error is %v", err)
	}
}

// An accepted stream is a healthy one, events or not: an agent of a
// paused region whose stream ctrld ends again and again (ctrld restarting,
// rolling) reconnects after the first failure's short wait every time,
// instead of one that doubles up to BackoffMax with each restart.
func TestAPausedRegionsAgentReconnectsPromptlyEveryTime(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	agent := env.Agent("eu")
	if _, err := env.Operator("alice").SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: "eu", Paused: true}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	const backoffMin = 100 * time.Millisecond
	d := dispatch.New(&deletions{keys: map[dispatch.Key]bool{}}, log, nil)
	w := watch.New(agent, d, func() ([]dispatch.Key, error) { return nil, nil },
		watch.Config{Region: "eu", Identity: "krane-0", BackoffMin: backoffMin, BackoffMax: 10 * time.Second},
		log, metrics.New(prometheus.NewRegistry()))
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx, 1) }()
	go func() { defer wg.Done(); w.Run(ctx) }()

	const restarts = 5
	for i := 1; i <= restarts; i++ {
		eventually.True(t, 10*time.Second, "the watcher streams from the paused region", func() bool {
			return strings.Count(logs.String(), "streaming from ctrld") >= i
		})
		env.Restart()
	}
	eventually.True(t, 10*time.Second, "the watcher streams again after the last restart", func() bool {
		return strings.Count(logs.String(), "streaming from ctrld") > restarts
	})
	waits := regexp.MustCompile(`reconnecting.*retry_in=(\S+)`).FindAllStringSubmatch(logs.String(), -1)
	if len(waits) < restarts {
		t.Fatalf("%d reconnects logged, want %d:\n%s", len(waits), restarts, logs.String())
	}
	for _, m := range waits {
		if wait, err := time.ParseDuration(m[1]); err != nil || wait > 5*backoffMin {
			t.Errorf("a reconnect waited %s (%v); after an accepted stream the wait is a first failure's, at most %s", m[1], err, 5*backoffMin)
		}
	}
}

// A stream ctrld refuses (here: a token of another region) is not taken
// for a connection: the agent never says it streams, and its last error
// stays the refusal.
func TestARefusedStreamIsNotAConnection(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	env.AgentToken("eu")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	d := dispatch.New(&deletions{keys: map[dispatch.Key]bool{}}, log, nil)
	w := watch.New(env.Agent("us"), d, func() ([]dispatch.Key, error) { return nil, nil },
		watch.Config{Region: "eu", Identity: "krane-0", BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		log, metrics.New(prometheus.NewRegistry()))
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx, 1) }()
	go func() { defer wg.Done(); w.Run(ctx) }()

	eventually.True(t, 10*time.Second, "several refused streams", func() bool { return strings.Count(logs.String(), "PermissionDenied") >= 5 })
	if strings.Contains(logs.String(), "streaming from ctrld") {
		t.Errorf("a refused stream was logged as streaming:\n%s", logs.String())
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "not streaming") {
		t.Errorf("ready: %v, want not streaming", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
