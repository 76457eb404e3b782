package tailer_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/internal/testmariadb"
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
	deadline := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case <-sub.Ready():
			_, open = sub.Take(64)
		case <-deadline:
			t.Fatal("the subscription stayed open with the database gone")
		}
	}
	if !errors.Is(sub.Err(), tailer.ErrDatabaseUnavailable) {
		t.Fatalf("the subscription ended with %v, want ErrDatabaseUnavailable", sub.Err())
	}
	if _, err := tl.Subscribe(ctx, "eu"); !errors.Is(err, tailer.ErrDatabaseUnavailable) {
		t.Fatalf("a new subscription with the database gone: %v, want ErrDatabaseUnavailable", err)
	}
	if got := heard(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("the hook heard %v, want [true false] (started, then unavailable)", got)
	}

	if err := server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for len(heard()) < 3 {
		select {
		case <-deadline:
			t.Fatalf("the database answers again, but the hook heard only %v", heard())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got := heard(); len(got) != 3 || !got[2] {
		t.Fatalf("the hook heard %v, want [true false true]", got)
	}
	again, err := tl.Subscribe(ctx, "eu")
	if err != nil {
		t.Fatalf("a subscription once the database answers again: %v", err)
	}
	again.Close()
}
