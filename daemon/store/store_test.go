package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/internal/testdb"
)

// The constructor ctrld uses must register the Ent runtime: without it the
// change-feed hooks (and validators) silently do not run. A mutation
// outside a transaction is the cheapest thing only the hooks refuse.
func TestOpenRegistersChangeFeedHooks(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	db2, err := store.Open(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	client := db2.Ent
	if err := store.Migrate(ctx, client); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, client); err != nil {
		t.Fatalf("second migration must be a no-op: %v", err)
	}
	err = client.Sentinel.Create().SetID("s1").SetWorkspaceID("w").SetEnvironmentID("e").SetRegion("r1").
		SetImage("s:1").SetReplicas(1).SetCPUMillicores(1).SetMemoryMib(1).Exec(ctx)
	if !errors.Is(err, changefeed.ErrNotInTx) {
		t.Fatalf("mutation outside a transaction through store.Open: got %v, want ErrNotInTx (hooks not registered?)", err)
	}
	if n := client.Sentinel.Query().CountX(ctx); n != 0 {
		t.Fatalf("rejected mutation wrote %d rows", n)
	}
}

// Times written by SQL (NOW(), the filler's gap rows) and by Ent (Go UTC)
// must agree, or retention misjudges ages by the server's UTC offset: the
// session is UTC even when the server (here: the DSN) says otherwise.
func TestSessionTimeZoneIsUTC(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	conn, err := store.Open(ctx, withParam(db.DSN, "time_zone=%27-05%3A00%27"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var now time.Time
	if err := conn.SQL.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("NOW() in the session is %s, %s away from UTC now", now, d.Round(time.Minute))
	}
}

// Arguments travel inside the statement text (interpolateParams), so the
// connection must speak a character set in which escaping holds: in GBK,
// "中'" escaped to "中\'" ends in a byte pair that swallows the backslash
// and closes the literal. A DSN that asks for GBK still gets utf8mb4, and
// a hostile string stays one value.
func TestArgumentsStayValuesWhateverTheDSNCharset(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	for _, charset := range []string{"", "gbk", "big5", "sjis"} {
		dsn := db.DSN
		if charset != "" {
			dsn = withParam(dsn, "charset="+charset)
		}
		conn, err := store.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("charset %q: %v", charset, err)
		}
		t.Cleanup(func() { conn.Close() })
		const hostile = "中' UNION SELECT 0x696e6a6563746564 -- "
		rows, err := conn.SQL.QueryContext(ctx, "SELECT ?", hostile)
		if err != nil {
			t.Fatalf("charset %q: %v", charset, err)
		}
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		rows.Close()
		var client string
		if err := conn.SQL.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&client); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != hostile {
			t.Errorf("charset %q: SELECT of one argument returned %q, want just %q", charset, got, hostile)
		}
		if client != "utf8mb4" {
			t.Errorf("charset %q: the connection speaks %s, want utf8mb4", charset, client)
		}
	}
}

// withParam adds a parameter to a DSN.
func withParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}

func TestOpenRejectsDSNWithoutDatabase(t *testing.T) {
	_, err := store.Open(context.Background(), "u:p@tcp(127.0.0.1:3306)/")
	if err == nil {
		t.Fatal("want an error for a DSN without a database name")
	}
}

// WithTx rolls back everything fn wrote when fn fails.
func TestWithTxRollsBackOnError(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	db2, err := store.Open(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	client := db2.Ent
	if err := store.Migrate(ctx, client); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = store.WithTx(ctx, client, func(tx *ent.Tx) error {
		if err := tx.Region.Create().SetID("r1").Exec(ctx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the function's error", err)
	}
	if n := client.Region.Query().CountX(ctx); n != 0 {
		t.Fatalf("failed transaction left %d rows", n)
	}
}

// Two transactions that lock two rows in opposite orders deadlock; the
// database rolls one back, and WithTx runs it again, so both commit.
func TestWithTxRerunsADeadlockedTransaction(t *testing.T) {
	ctx := context.Background()
	client := storetest.New(t).Ent
	for _, r := range []string{"a", "b"} {
		if err := client.Region.Create().SetID(r).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Both lock their first row, wait for the other to have its first,
	// then ask for the other's: a deadlock on the first run only.
	var firstRun sync.WaitGroup
	firstRun.Add(2)
	var runs atomic.Int32
	lockBoth := func(first, second string) error {
		run := 0
		return store.WithTx(ctx, client, func(tx *ent.Tx) error {
			run++
			runs.Add(1)
			if _, err := tx.Region.Query().Where(region.ID(first)).ForUpdate().IDs(ctx); err != nil {
				return err
			}
			if run == 1 {
				firstRun.Done()
				firstRun.Wait()
			}
			_, err := tx.Region.Query().Where(region.ID(second)).ForUpdate().IDs(ctx)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- lockBoth("a", "b") }()
	go func() { errs <- lockBoth("b", "a") }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a transaction failed: %v", err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs, want 3 (one transaction rolled back for the deadlock and run again)", runs.Load())
	}
}

// A transaction whose lock wait timed out (error 1205) is run again: the
// lock's holder may be done by then.
func TestWithTxRerunsATransactionWhoseLockWaitTimedOut(t *testing.T) {
	ctx := context.Background()
	client := storetest.New(t).Ent
	if err := client.Region.Create().SetID("a").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	locked := make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- store.WithTx(ctx, client, func(tx *ent.Tx) error {
			if _, err := tx.Region.Query().Where(region.ID("a")).ForUpdate().IDs(ctx); err != nil {
				return err
			}
			close(locked)
			// Longer than the waiter's one-second lock wait, shorter than two.
			time.Sleep(1500 * time.Millisecond)
			return nil
		})
	}()
	<-locked
	runs := 0
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		runs++
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		_, err := tx.Region.Query().Where(region.ID("a")).ForUpdate().IDs(ctx)
		return err
	})
	if err != nil {
		t.Fatalf("the waiting transaction failed: %v", err)
	}
	if runs != 2 {
		t.Fatalf("%d runs, want 2 (the first timed out waiting for the lock)", runs)
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
}

// A lock held for longer than two lock waits fails the transaction after
// its one rerun, not after eight: each wait was a whole lock wait timeout.
func TestWithTxRerunsALockWaitTimeoutOnce(t *testing.T) {
	ctx := context.Background()
	client := storetest.New(t).Ent
	if err := client.Region.Create().SetID("a").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	hold, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	if _, err := hold.Region.Query().Where(region.ID("a")).ForUpdate().IDs(ctx); err != nil {
		t.Fatal(err)
	}
	runs := 0
	err = store.WithTx(ctx, client, func(tx *ent.Tx) error {
		runs++
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		_, err := tx.Region.Query().Where(region.ID("a")).ForUpdate().IDs(ctx)
		return err
	})
	if !store.IsConflict(err) || runs != 2 {
		t.Fatalf("%d runs ending with %v, want 2 ending with a lock wait timeout", runs, err)
	}
}

// Streams holding every connection of their pool leave the rest of ctrld
// its own: the main pool still answers (invariant I8).
func TestStreamsCannotTakeTheMainPool(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	if n := db.StreamSQL.Stats().MaxOpenConnections; n != store.StreamConns {
		t.Fatalf("the streams' pool allows %d connections, want %d", n, store.StreamConns)
	}
	for range store.StreamConns {
		conn, err := db.StreamSQL.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := db.Ent.Region.Query().Count(ctx); err != nil {
		t.Fatalf("with the streams' pool taken, the main pool did not answer: %v", err)
	}
}

// A burst that takes every connection of a pool, then another, reuses the
// connections the first opened: none is closed when it is handed back.
// (A pool that kept fewer idle than it may open closed and reopened about
// one connection per stream start while a thousand agents reconnected.)
func TestABurstKeepsItsConnectionsForTheNext(t *testing.T) {
	db := storetest.New(t)
	for name, pool := range map[string]*sql.DB{"main": db.SQL, "streams": db.StreamSQL} {
		size := pool.Stats().MaxOpenConnections
		burst := func() {
			var wg sync.WaitGroup
			for range size {
				wg.Go(func() {
					if _, err := pool.ExecContext(context.Background(), "DO SLEEP(0.05)"); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		}
		burst()
		opened := pool.Stats().OpenConnections
		burst()
		st := pool.Stats()
		if st.MaxIdleClosed != 0 || st.OpenConnections != opened {
			t.Errorf("%s pool: %d connections closed as surplus idle ones, %d open after the second burst, %d after the first; want none closed and the same open",
				name, st.MaxIdleClosed, st.OpenConnections, opened)
		}
	}
}

// WithTx transactions are REPEATABLE READ even on a server whose default is
// READ COMMITTED (common for MySQL replication): the change feed's locking
// reads and unique-name checks rely on it. Here a second read inside the
// transaction must not see a commit made in between.
func TestWithTxIsRepeatableReadWhateverTheServerDefault(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	sep := "?"
	if strings.Contains(db.DSN, "?") {
		sep = "&"
	}
	readCommitted, err := store.Open(ctx, db.DSN+sep+"tx_isolation=%27READ-COMMITTED%27")
	if err != nil {
		t.Fatal(err)
	}
	defer readCommitted.Close()
	if err := store.Migrate(ctx, readCommitted.Ent); err != nil {
		t.Fatal(err)
	}
	if _, err := readCommitted.SQL.ExecContext(ctx, "INSERT INTO regions (id, paused, resync_generation, created_at, updated_at) VALUES ('eu', false, 0, NOW(), NOW())"); err != nil {
		t.Fatal(err)
	}
	err = store.WithTx(ctx, readCommitted.Ent, func(tx *ent.Tx) error {
		before := tx.Region.Query().Where(region.ID("eu")).OnlyX(ctx)
		if _, err := readCommitted.SQL.ExecContext(ctx, "UPDATE regions SET paused = true WHERE id = 'eu'"); err != nil {
			return err
		}
		after := tx.Region.Query().Where(region.ID("eu")).OnlyX(ctx)
		if before.Paused != after.Paused {
			t.Errorf("the transaction saw a commit made after its first read: not REPEATABLE READ")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
