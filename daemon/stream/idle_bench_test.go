package stream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/internal/testcerts"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// idleClientsEnv names the spec file of TestHelperIdleClients; the helper
// skips unless it is set.
const idleClientsEnv = "DEPLOYSYNC_BENCH_IDLE_CLIENTS"

// idleClients is what TestHelperIdleClients opens: one stream per token,
// each on a connection of its own, as real agents have.
type idleClients struct {
	Addr   string
	Region string
	Tokens []string
	// CA, if set, is the PEM file of the CA the server's TLS certificate
	// is signed by: the clients dial with TLS.
	CA string
}

// idleDeployments is what each idle stream's full sync sends.
const idleDeployments = 10

// BenchmarkIdleStreams measures what idle streams cost ctrld, side by side
// with the seed algorithm: heap, goroutine stacks and RSS per stream once N
// streams have done their full sync (after a GC, over the process before
// the streams opened), the time to open them (from the first dial to every
// stream's full_sync_done bookmark) and the statements and CPU time (the
// server's, and the database server's where it runs on this machine) that
// took, the database's statements/s while they are idle, and the same for
// opening them again once they closed (reopen: the agents' identities are
// known then, as after a ctrld restart). The clients run in a child
// process (TestHelperIdleClients), so that only the server's side is
// counted. On a machine of few cores the three processes share, the open
// times vary by a quarter from run to run; the CPU times vary less. N is 1000, or DEPLOYSYNC_BENCH_STREAMS (10000 needs about 10,000
// file descriptors in each process). Run alone, with -benchtime=1x: the
// statement counts are server-wide.
//
// stream-tls is ctrld with TLS, as production runs it; the seed has no TLS.
// RSS is the process's: a sub-benchmark after the first reuses memory an
// earlier one freed and the runtime kept, so its rss-delta-MiB reads low.
// Compare RSS with each run alone (-bench 'IdleStreams/seed$').
func BenchmarkIdleStreams(b *testing.B) {
	n := benchSizes(b, "DEPLOYSYNC_BENCH_STREAMS", 1000)[0]
	for _, algo := range []string{"stream", "stream-tls", "seed"} {
		b.Run(fmt.Sprintf("%s/streams=%d", algo, n), func(b *testing.B) {
			for range b.N {
				benchIdleStreams(b, algo, n)
			}
		})
	}
}

func benchIdleStreams(b *testing.B, algo string, n int) {
	// Admit n agents, each with a token and an identity of its own, all in
	// one region (the worst case for admission, whose bound is per region,
	// sized for one cluster's agents: MaxAgentsPerRegion).
	cfg := server.Config{
		Stream:  stream.Config{MaxStreams: n},
		Cluster: cluster.Config{MaxAgentsPerRegion: n},
	}
	// stream-tls: ctrld as production runs it, with TLS (every connection
	// then holds TLS's buffers and state).
	var certs testcerts.Files
	served := algo
	if algo == "stream-tls" {
		served, certs = "stream", testcerts.Write(b)
		cfg.TLSCert, cfg.TLSKey = certs.ServerCert, certs.ServerKey
	}
	env, addr, _ := benchEnv(b, served, cfg)
	seedDeployments(b, env.DB, "eu", idleDeployments)
	spec := idleClients{Addr: addr, Region: "eu", Tokens: make([]string, n), CA: certs.CA}
	for i := range spec.Tokens {
		spec.Tokens[i] = env.AgentToken("eu")
	}
	specFile := filepath.Join(b.TempDir(), "clients.json")
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		b.Fatal(err)
	}

	before := serverFootprint(b)
	statementsBefore := statements(b, env)
	cpuBefore := cpuTimes(b, env)
	openTime, closeClients := openIdleClients(b, specFile)
	opened := statements(b, env) - statementsBefore
	cpuOpen := cpuTimes(b, env).since(cpuBefore)

	after := serverFootprint(b)
	writeProfiles(b, algo)
	perStream := func(after, before uint64) float64 { return (float64(after) - float64(before)) / float64(n) }
	b.ReportMetric(perStream(after.heapLive, before.heapLive)/1024, "heap-live-KiB/stream")
	b.ReportMetric(perStream(after.heapInuse, before.heapInuse)/1024, "heap-inuse-KiB/stream")
	b.ReportMetric(perStream(after.stacks, before.stacks)/1024, "stack-KiB/stream")
	b.ReportMetric((float64(after.rss)-float64(before.rss))/(1<<20), "rss-delta-MiB")
	b.ReportMetric(float64(after.rss)/(1<<20), "rss-MiB")
	b.ReportMetric(perStream(uint64(after.goroutines), uint64(before.goroutines)), "goroutines/stream")
	b.ReportMetric(openTime.Seconds(), "open-s")
	// The tailer's polls during the open are counted too (about 14/s).
	b.ReportMetric(float64(opened)/float64(n), "statements/open")
	cpuOpen.report(b, n, "open")
	b.ReportMetric(statementsPerSecond(b, env), "queries/s")
	// The runtime keeps what the opening used and freed, and returns it to
	// the system a little at a time: rss-MiB is the process as the streams
	// finished opening, rss-scavenged-MiB what their idle state holds.
	debug.FreeOSMemory()
	b.ReportMetric(float64(serverFootprint(b).rss)/(1<<20), "rss-scavenged-MiB")

	// The same agents again, as after a ctrld restart: their identities
	// are known now.
	closeClients()
	time.Sleep(2 * time.Second) // the ended streams' disconnects
	statementsBefore = statements(b, env)
	cpuBefore = cpuTimes(b, env)
	reopenTime, closeClients := openIdleClients(b, specFile)
	reopened := statements(b, env) - statementsBefore
	cpuTimes(b, env).since(cpuBefore).report(b, n, "reopen")
	closeClients()
	b.ReportMetric(reopenTime.Seconds(), "reopen-s")
	b.ReportMetric(float64(reopened)/float64(n), "statements/reopen")
}

// openIdleClients starts TestHelperIdleClients on specFile in a child
// process, waits until every stream did its full sync, and returns how long
// that took and the function that closes the clients.
func openIdleClients(b *testing.B, specFile string) (time.Duration, func()) {
	b.Helper()
	child := exec.Command(os.Args[0], "-test.run=^TestHelperIdleClients$")
	child.Env = append(os.Environ(), idleClientsEnv+"="+specFile)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	closeClients := sync.OnceFunc(func() {
		stdin.Close() // the helper's signal to end
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			child.Process.Kill()
			<-done
		}
	})
	b.Cleanup(closeClients)
	return waitReady(b, stdout), closeClients
}

// waitReady reads the helper's output until its "ready" line and returns
// the open time it reports.
func waitReady(b *testing.B, stdout io.Reader) time.Duration {
	b.Helper()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "ready "); ok {
			d, err := time.ParseDuration(rest)
			if err != nil {
				b.Fatalf("helper: %q", lines.Text())
			}
			go io.Copy(io.Discard, stdout) // the helper may write more
			return d
		}
		b.Log("helper: ", lines.Text())
	}
	b.Fatal("the idle clients ended before their streams were ready")
	return 0
}

// footprint is what the server process holds.
type footprint struct {
	// heapLive counts live objects (HeapAlloc); heapInuse the spans they
	// occupy (HeapInuse), which a start's garbage leaves partly empty.
	heapLive, heapInuse uint64
	stacks              uint64 // StackInuse: goroutine stacks
	rss                 uint64 // VmRSS: goroutine stacks and all
	goroutines          int
}

// serverFootprint returns the process's footprint after a collection.
func serverFootprint(b *testing.B) footprint {
	b.Helper()
	time.Sleep(time.Second) // let stream starts finish their work
	// Twice: what pools (sync.Pool, gRPC's buffer pools) hold survives
	// one collection, and whether a stream's keepalive had just sent
	// decided how much that was (up to 12 KiB per stream at 1,000).
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	f := footprint{heapLive: m.HeapAlloc, heapInuse: m.HeapInuse, stacks: m.StackInuse, goroutines: runtime.NumGoroutine()}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS: %q", line)
			}
			f.rss = kb * 1024
		}
	}
	return f
}

// TestHelperIdleClients is not a test: BenchmarkIdleStreams runs it in a
// child process, and it skips unless DEPLOYSYNC_BENCH_IDLE_CLIENTS names
// its spec file (idleClients). It opens one stream per token, each on a
// connection of its own, prints "ready <open time>" once every stream got
// its full_sync_done bookmark, and holds them until its stdin closes.
func TestHelperIdleClients(t *testing.T) {
	specFile := os.Getenv(idleClientsEnv)
	if specFile == "" {
		t.Skip("run by BenchmarkIdleStreams in a child process")
	}
	data, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec idleClients
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var synced sync.WaitGroup
	var running sync.WaitGroup
	followers := make([]*streamtest.Follower, len(spec.Tokens))
	start := time.Now()
	for i, token := range spec.Tokens {
		client := ctrlv1.NewClusterServiceClient(dialIdle(t, spec, token))
		f := streamtest.New(client, spec.Region, fmt.Sprintf("idle-agent-%d", i))
		synced.Add(1)
		done := sync.OnceFunc(synced.Done) // later full syncs are not waited for
		f.OnEvent(func(ev *ctrlv1.DeploymentChangeEvent, _ time.Time) {
			if ev.GetBookmark().GetFullSyncDone() {
				done()
			}
		})
		followers[i] = f
		running.Go(func() { f.Run(ctx) })
	}
	allSynced := make(chan struct{})
	go func() { synced.Wait(); close(allSynced) }()
	select {
	case <-allSynced:
	case <-time.After(10 * time.Minute):
		for _, f := range followers {
			if s := f.Snapshot(); s.FullSyncs == 0 {
				t.Fatalf("a stream did not sync within 10 minutes: last error %v", s.LastErr)
			}
		}
	}
	fmt.Printf("ready %v\n", time.Since(start))
	io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
	stop()
	running.Wait()
}

// dialIdle connects to the spec's server with token, with TLS if the spec
// has a CA.
func dialIdle(t *testing.T, spec idleClients, token string) *grpc.ClientConn {
	if spec.CA == "" {
		return servertest.Dial(t, spec.Addr, token)
	}
	creds, err := credentials.NewClientTLSFromFile(spec.CA, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(spec.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearer.Credentials{Token: token}), grpc.WithConnectParams(dial.Reconnect()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// profileDirEnv names a directory BenchmarkIdleStreams writes the server's
// heap and goroutine profiles to while its streams are idle (ALGO-heap.pprof,
// ALGO-goroutine.txt), to see what a stream holds.
const profileDirEnv = "DEPLOYSYNC_BENCH_PROFILE_DIR"

func writeProfiles(b *testing.B, algo string) {
	b.Helper()
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return
	}
	for _, p := range []struct {
		name, file string
		debug      int
	}{{"heap", algo + "-heap.pprof", 0}, {"goroutine", algo + "-goroutine.txt", 1}} {
		f, err := os.Create(filepath.Join(dir, p.file))
		if err != nil {
			b.Fatal(err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// cpu is CPU time (user and system) used by this process, the server, and
// by the database server's; db is negative where the database's process
// cannot be seen (not on this machine).
type cpu struct{ server, db time.Duration }

// cpuTimes returns the CPU time used so far by this process and by the
// database server's (found through its pid file).
func cpuTimes(b *testing.B, env *servertest.Env) cpu {
	b.Helper()
	var self syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	c := cpu{server: time.Duration(self.Utime.Nano() + self.Stime.Nano()), db: -1}
	var pidFile string
	if err := env.DB.SQL.QueryRow("SELECT @@pid_file").Scan(&pidFile); err != nil {
		b.Fatal(err)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		return c
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "stat"))
	if err != nil {
		return c
	}
	// After the command's name in parentheses, utime and stime are the
	// 12th and 13th fields, in clock ticks (100 a second on Linux).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("%s: utime %q, stime %q", pidFile, fields[11], fields[12])
	}
	c.db = time.Duration(utime+stime) * 10 * time.Millisecond
	return c
}

// since is the CPU time used between before and c.
func (c cpu) since(before cpu) cpu {
	d := cpu{server: c.server - before.server, db: -1}
	if c.db >= 0 && before.db >= 0 {
		d.db = c.db - before.db
	}
	return d
}

// report reports c per stream of n, in milliseconds, as what's metrics.
func (c cpu) report(b *testing.B, n int, what string) {
	b.ReportMetric(float64(c.server.Microseconds())/1000/float64(n), "server-cpu-ms/"+what)
	if c.db >= 0 {
		b.ReportMetric(float64(c.db.Microseconds())/1000/float64(n), "db-cpu-ms/"+what)
	}
}

// statements is the database server's count of the statements it has
// executed (server-wide: run alone).
func statements(b *testing.B, env *servertest.Env) int64 {
	b.Helper()
	var name string
	var n int64
	if err := env.DB.SQL.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}
