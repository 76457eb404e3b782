package tailer_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testmariadb"
	"github.com/deploysync/deploysync/internal/testmetrics"
)

// A tailer that cannot read its database for UnavailableAfter ends every
// subscription with ErrDatabaseUnavailable (so agents go to a replica that
// can) and refuses new ones, says so to its hook, and takes subscriptions
// again once the database answers.
func TestATailerWithoutItsDatabaseEndsItsStreamsAndTakesThemBackAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("tailer: starts a MariaDB server of its own; skipped in -short mode")
	}
	server := testmariadb.Own(t)
	if server == nil {
		t.Skip("no mariadbd")
	}
	ctx := context.Background()
	db := storetest.NewOn(t, server.DSN)

	var (
		mu       sync.Mutex
		switches []bool
	)
	heard := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), switches...)
	}
	tl := tailer.New(db.SQL, tailer.Config{PollInterval: 10 * time.Millisecond, UnavailableAfter: 300 * time.Millisecond},
		slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	tl.OnAvailability(func(available bool) {
		mu.Lock()
		defer mu.Unlock()
		switches = append(switches, available)
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); tl.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-stopped })
	sub, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	server.Kill()
	awaitEnd(t, sub, 30*time.Second, tailer.ErrDatabaseUnavailable, "the subscription stayed open with the database gone")
	if _, err := tl.Subscribe(ctx, "eu"); !errors.Is(err, tailer.ErrDatabaseUnavailable) {
		t.Fatalf("a new subscription with the database gone: %v, want ErrDatabaseUnavailable", err)
	}
	// The tailer ends its subscriptions before it tells the hook, so the
	// hook may hear of it a moment after the subscription ended.
	eventually.True(t, 10*time.Second, "the hook never heard the database go", func() bool { return len(heard()) >= 2 })
	if got := heard(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("the hook heard %v, want [true false] (started, then unavailable)", got)
	}

	if err := server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the database answers again, but the hook never heard it", func() bool { return len(heard()) >= 3 })
	if got := heard(); len(got) != 3 || !got[2] {
		t.Fatalf("the hook heard %v, want [true false true]", got)
	}
	again, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatalf("a subscription once the database answers again: %v", err)
	}
	again.Close()
}

// A database that hangs instead of refusing (a host gone without a reset,
// a network partition) is as unavailable as one that refuses: each poll
// gets UnavailableAfter, and the streams end.
func TestATailerWhoseDatabaseHangsEndsItsStreams(t *testing.T) {
	db, proxy := dbBehindProxy(t)

	tl := startTailer(t, db, tailer.Config{PollInterval: 10 * time.Millisecond, UnavailableAfter: 300 * time.Millisecond})
	ctx := context.Background()
	sub, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	proxy.freeze()
	awaitEnd(t, sub, 20*time.Second, tailer.ErrDatabaseUnavailable, "the subscription stayed open with the database hanging")
	proxy.thaw()
	eventually.True(t, 20*time.Second, "the database answers again, but a subscription is still refused", func() bool {
		again, err := tl.Subscribe(ctx, "eu")
		if err != nil {
			return false
		}
		again.Close()
		return true
	})
}

// A region read that hangs fails in time too, and the polls after it
// notice: the tailer's one loop must not wait on it. With polls only on a
// poke, the region read is the first statement the hang catches.
func TestATailerWhoseRegionReadHangsEndsItsStreams(t *testing.T) {
	db, proxy := dbBehindProxy(t)

	reg := prometheus.NewRegistry()
	tl := startTailerWith(t, db, tailer.Config{PollInterval: time.Hour, ControlInterval: 10 * time.Millisecond, UnavailableAfter: 300 * time.Millisecond}, metrics.New(reg))
	sub, err := tl.Subscribe(context.Background(), "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// The first poll is done, and the region reads go on.
	eventually.True(t, 10*time.Second, "the tailer never polled", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_tailer_poll_duration_seconds") > 0
	})
	proxy.freeze()
	time.Sleep(50 * time.Millisecond) // a region read is under way, hanging
	tl.Poke()
	awaitEnd(t, sub, 20*time.Second, tailer.ErrDatabaseUnavailable, "the subscription stayed open with the database hanging")
}

// dbBehindProxy is a test database on the shared server, reached through
// a proxy the test can freeze.
func dbBehindProxy(t *testing.T) (*store.DB, *proxy) {
	t.Helper()
	server, err := mysql.ParseDSN(cmp.Or(os.Getenv(testdb.EnvDSN), testdb.DefaultDSN))
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, server.Addr)
	server.Addr = p.addr
	db := storetest.NewOn(t, server.FormatDSN())
	t.Cleanup(p.thaw) // runs first: the database is dropped through the proxy
	return db, p
}

// proxy forwards TCP connections to a server until frozen: then it keeps
// them open and forwards nothing, as a dead host or a partition does.
type proxy struct {
	addr   string
	mu     sync.Mutex
	frozen chan struct{} // closed while thawed; replaced when frozen
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &proxy{addr: l.Addr().String(), frozen: make(chan struct{})}
	close(p.frozen)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

// pipe copies from src to dst, holding each read while the proxy is frozen.
func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed := p.frozen
			p.mu.Unlock()
			<-thawed
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = make(chan struct{})
}

func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}
