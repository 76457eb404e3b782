package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/internal/testproc"
)

// EnvBin names the environment variable that points at a Prometheus
// server binary to run instead of the one scripts/prometheus.sh fetches.
const EnvBin = "DEPLOYSYNC_PROMETHEUS_BIN"

// Interval is how often the server scrapes its targets and evaluates its
// rules: short, so a test sees a rate after a few seconds.
const Interval = time.Second

// DefaultJob is the scrape job's name (the job label of what it scrapes)
// when Options.Job is empty.
const DefaultJob = "promtest"

// readyWithin bounds a start: Prometheus replays its write-ahead log
// before it is ready, a second or two for a test's data.
const readyWithin = 60 * time.Second

// Options says what the server scrapes and evaluates.
type Options struct {
	// Targets are the host:port addresses scraped at /metrics, every
	// Interval, in one job.
	Targets []string
	// Job names that job; DefaultJob when empty.
	Job string
	// Rules is the content of a rule file (Prometheus' YAML: groups of
	// alerting or recording rules), evaluated every Interval; empty for
	// none. Rules Prometheus refuses fail the start, with its log.
	Rules string
}

// Server is a Prometheus server on 127.0.0.1, running or stopped.
type Server struct {
	bin  string
	dir  string // config, rules, TSDB and log; removed by Close
	port int
	args []string

	// mu guards proc and closed: a test may Stop while another goroutine
	// queries, and Close runs from t.Cleanup.
	mu     sync.Mutex
	proc   *testproc.Process // the running server; nil while stopped
	closed bool
}

// StartForTest starts a server that is closed when t ends. A test that
// cannot get the binary fails; only -short mode skips, before looking.
func StartForTest(t testing.TB, opts Options) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("promtest: runs a Prometheus server; skipped in -short mode")
	}
	s, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start starts a server on a free port with a new data directory and
// waits until it is ready. Call Close when done (devstack runs one per
// region this way).
func Start(ctx context.Context, opts Options) (*Server, error) {
	for _, target := range opts.Targets {
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("promtest: target %q: want host:port (%w)", target, err)
		}
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	testproc.ReapStale()
	var s *Server
	err = testproc.WithFreePorts(1, func(ports []int) (err error) {
		s, err = start(ctx, bin, opts, ports[0])
		return err
	})
	return s, err
}

func start(ctx context.Context, bin string, opts Options, port int) (s *Server, err error) {
	dir, err := testproc.NewDir("prometheus")
	if err != nil {
		return nil, err
	}
	s = &Server{bin: bin, dir: dir, port: port}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	config, err := writeConfig(dir, opts)
	if err != nil {
		return nil, err
	}
	// Every flag names the directory: testproc tells the server's pid
	// from a reused one by it.
	s.args = []string{
		"--config.file=" + config,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + s.addr(),
	}
	return s, s.Start(ctx)
}

// writeConfig writes the server's configuration (JSON, which is YAML) and
// rule file into dir and returns the configuration's path.
func writeConfig(dir string, opts Options) (string, error) {
	interval := Interval.String()
	job := opts.Job
	if job == "" {
		job = DefaultJob
	}
	targets := opts.Targets
	if targets == nil {
		targets = []string{} // an empty list, not null
	}
	config := map[string]any{
		"global": map[string]any{
			"scrape_interval":     interval,
			"scrape_timeout":      interval, // may not exceed the interval
			"evaluation_interval": interval,
		},
		"scrape_configs": []any{map[string]any{
			"job_name":       job,
			"static_configs": []any{map[string]any{"targets": targets}},
		}},
	}
	if opts.Rules != "" {
		rules := filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(rules, []byte(opts.Rules), 0o644); err != nil {
			return "", err
		}
		config["rule_files"] = []string{rules}
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "prometheus.yml")
	return path, os.WriteFile(path, data, 0o644)
}

// URL is the server's base URL (http://127.0.0.1:PORT), the same across
// Stop and Start.
func (s *Server) URL() string { return "http://" + s.addr() }

func (s *Server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Dir holds the server's configuration, rule file, data and log
// (prometheus.log, every run's); Close removes it.
func (s *Server) Dir() string { return s.dir }

// Start starts a stopped server again on the same port and data
// directory, and waits until it is ready: it has replayed what it had
// scraped before it stopped and scrapes on. A running server is left as
// it is; a closed one returns ErrClosed.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.proc != nil && !s.proc.Exited() {
		s.mu.Unlock()
		return nil
	}
	p, err := testproc.Start(s.dir, s.bin, s.args...)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("promtest: %w", err)
	}
	s.proc = p
	s.mu.Unlock()

	client := &http.Client{}
	err = testproc.WaitFor(ctx, p, readyWithin, func(ctx context.Context) error {
		return get(ctx, client, s.URL()+"/-/ready")
	})
	if err != nil {
		s.Stop()
		return fmt.Errorf("promtest: %w", err)
	}
	return nil
}

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits
// until it is gone; its data stays for Start. Stopping a stopped server
// does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.proc != nil {
		s.proc.Kill()
		s.proc = nil
	}
}

// Close stops the server for good and removes its directory. Later calls
// do nothing.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true // in the same hold as the kill: no Start slips in between
	s.stopLocked()
	os.RemoveAll(s.dir)
}

// LogTail is the end of the server's log (all its runs), for failure
// messages.
func (s *Server) LogTail() string {
	data, _ := os.ReadFile(s.logPath())
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// logPath is where internal/testproc writes the server's output.
func (s *Server) logPath() string { return filepath.Join(s.dir, filepath.Base(s.bin)+".log") }

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
