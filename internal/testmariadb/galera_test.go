package testmariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A write on any node is on every node; the cluster keeps taking writes
// when one node is lost, and the lost node catches up when it comes back.
func TestGaleraReplicatesAndSurvivesANodeLoss(t *testing.T) {
	g := OwnGalera(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dbs := make([]*sql.DB, len(g.Nodes))
	for i, n := range g.Nodes {
		db, err := sql.Open("mysql", n.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	// A write a Galera node aborts (certification failed, or a DDL
	// replicating meanwhile brute-force aborted it: error 1213) is to be
	// run again, as every Galera client must; it did nothing.
	exec := func(node int, q string, args ...any) {
		t.Helper()
		for attempt := 1; ; attempt++ {
			_, err := dbs[node].ExecContext(ctx, q, args...)
			var my *mysql.MySQLError
			if errors.As(err, &my) && my.Number == 1213 && attempt < 5 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatalf("node %d: %s: %v", node+1, q, err)
			}
			return
		}
	}
	count := func(node int) int {
		t.Helper()
		// wsrep_sync_wait: the read waits until the node has applied
		// everything the cluster committed before it.
		conn, err := dbs[node].Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var n int
		if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
			t.Fatalf("node %d: %v", node+1, err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM g.x").Scan(&n); err != nil {
			t.Fatalf("node %d: count: %v", node+1, err)
		}
		return n
	}

	exec(0, "CREATE DATABASE g")
	exec(1, "CREATE TABLE g.x (id BIGINT AUTO_INCREMENT PRIMARY KEY, node INT)")
	for i := range g.Nodes {
		exec(i, "INSERT INTO g.x (node) VALUES (?)", i+1)
	}
	for i := range g.Nodes {
		if n := count(i); n != 3 {
			t.Fatalf("node %d sees %d rows, want the 3 written on the 3 nodes", i+1, n)
		}
	}
	// Each node hands out its own interleaved auto-increment values.
	var increment int
	if err := dbs[0].QueryRowContext(ctx, "SELECT @@auto_increment_increment").Scan(&increment); err != nil || increment != 3 {
		t.Fatalf("auto_increment_increment = %d (%v), want 3 as Galera sets it", increment, err)
	}

	g.Nodes[1].Kill()
	exec(0, "INSERT INTO g.x (node) VALUES (1)")
	exec(2, "INSERT INTO g.x (node) VALUES (3)")
	if n := count(2); n != 5 {
		t.Fatalf("with node 2 lost, node 3 sees %d rows, want 5", n)
	}
	start := time.Now()
	if err := g.Nodes[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 2 rejoined in %s", time.Since(start).Round(time.Millisecond))
	// It was sent only what it missed: a node sent a whole copy (what it
	// gets when it does not know its position) blocks its donor's writes.
	if from := lastStateTransferFrom(t, g.Nodes[1]); from == 0 {
		t.Errorf("node 2 rejoined by a full copy of a donor's data, want only what it missed (incremental state transfer)")
	}
	if n := count(1); n != 5 {
		t.Fatalf("node 2 back: sees %d rows, want the 5 (the 2 written while it was away)", n)
	}
	exec(1, "INSERT INTO g.x (node) VALUES (2)")
	for i := range g.Nodes {
		if n := count(i); n != 6 {
			t.Fatal(fmt.Sprintf("node %d sees %d rows after node 2 came back and wrote, want 6", i+1, n))
		}
	}
}

// lastStateTransferFrom is the first change the node's last state transfer
// brought it: 0 for a whole copy, more when it was sent only what it
// missed. It reads the node's log, which is the only place that says.
func lastStateTransferFrom(t *testing.T, n *Server) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dir, "mariadbd.log"))
	if err != nil {
		t.Fatal(err)
	}
	const mark = "Prepared IST receiver for "
	i := strings.LastIndex(string(data), mark)
	if i < 0 {
		t.Fatalf("no state transfer in node's log")
	}
	from, _, _ := strings.Cut(string(data[i+len(mark):]), "-")
	n2, err := strconv.Atoi(from)
	if err != nil {
		t.Fatalf("state transfer line: %v", err)
	}
	return n2
}
