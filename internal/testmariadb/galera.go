package testmariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/internal/testproc"
)

// galeraProvider is where Debian's galera-4 puts the replication library.
const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// GaleraNodes is the size of the clusters StartGalera runs: the smallest
// that keeps a majority (and so keeps taking writes) when one node is lost.
const GaleraNodes = 3

// Galera is a MariaDB Galera cluster of GaleraNodes nodes on loopback, as
// ../shared/recipes/galera.md sets one up: every node takes reads and
// writes, and a write committed on one is certified against the others'
// before it commits (a conflict fails one side with error 1213).
type Galera struct {
	// Nodes are the cluster's servers; each DSN reaches one node (no
	// database) as the user testdb.DefaultDSN names. Kill and Start one
	// to lose and regain it: it rejoins by incremental state transfer.
	Nodes []*Server
}

// Stop stops every node and removes their directories.
func (g *Galera) Stop() {
	for _, n := range g.Nodes {
		n.Stop()
	}
}

// StartGalera initializes node 1, bootstraps the cluster on it, then
// starts the other nodes, which copy node 1's data (rsync state transfer)
// and join; it returns once every node is synced. About 30 s on 2 cores.
// Call Stop when done.
func StartGalera(ctx context.Context) (*Galera, error) {
	server, err1 := findBinary("mariadbd")
	install, err2 := findBinary("mariadb-install-db")
	_, err3 := os.Stat(galeraProvider)
	_, err4 := findBinary("rsync")
	// The joiner's state transfer runs mariadb-server's script, which
	// finds its listening port with ss or lsof.
	_, err5 := findBinary("wsrep_sst_rsync")
	_, err6 := findBinary("ss")
	if err6 != nil {
		_, err6 = findBinary("lsof")
	}
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, fmt.Errorf("%w (Galera needs mariadb-server (mariadbd, wsrep_sst_rsync), galera-4, rsync and ss or lsof: %v)", ErrNotInstalled, err)
	}
	testproc.ReapStale()
	g := &Galera{}
	ok := false
	defer func() {
		if !ok {
			g.Stop()
		}
	}()
	for i := range GaleraNodes {
		dir, err := testproc.NewDir(fmt.Sprintf("galera%d", i+1))
		if err != nil {
			return nil, err
		}
		g.Nodes = append(g.Nodes, &Server{dir: dir})
	}
	runAs, err := galeraUser(g.Nodes)
	if err != nil {
		return nil, err
	}
	first := g.Nodes[0]
	data := filepath.Join(first.dir, "data")
	initArgs := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}
	if runAs != "" {
		initArgs = append(initArgs, "--user="+runAs)
	}
	if err := testproc.Run(ctx, first.dir, install, initArgs...); err != nil {
		return nil, err
	}
	user, err := mysql.ParseDSN(testdb.DefaultDSN)
	if err != nil {
		return nil, err
	}
	// Each node: a SQL port, and the Galera ports for group communication,
	// incremental state transfer and rsync state transfer.
	err = testproc.WithFreePorts(4*GaleraNodes, func(ports []int) error {
		// A cluster name of its own: two test binaries' clusters on one
		// machine must never merge.
		name := "dstest-" + strconv.Itoa(ports[0])
		var members []string
		for i := range GaleraNodes {
			members = append(members, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
		}
		for i, n := range g.Nodes {
			p := ports[4*i : 4*i+4]
			if err := n.configureGaleraNode(server, i+1, name, members, p, runAs); err != nil {
				return err
			}
			cfg := user.Clone()
			cfg.Addr = "127.0.0.1:" + strconv.Itoa(p[0])
			n.DSN = cfg.FormatDSN()
		}
		err := first.start(ctx, "--wsrep-new-cluster")
		if err == nil {
			err = createUser(ctx, first, user.User, user.Passwd)
		}
		for _, n := range g.Nodes[1:] {
			if err == nil {
				err = n.start(ctx)
			}
		}
		if err != nil {
			for _, n := range g.Nodes {
				n.Kill() // a port taken in between: the next attempt has others
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return g, nil
}

// configureGaleraNode writes node number i's my.cnf and sets its command
// line and readiness check. A file, not flags: the state-transfer scripts
// mariadbd runs read the node's options from it.
func (n *Server) configureGaleraNode(server string, i int, cluster string, members []string, ports []int, runAs string) error {
	sqlPort, gcomm, ist, sst := ports[0], ports[1], ports[2], ports[3]
	// Joiners start on an empty data directory that state transfer fills.
	if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o755); err != nil {
		return err
	}
	if err := chownTree(n.dir, runAs); err != nil {
		return err
	}
	conf := filepath.Join(n.dir, "my.cnf")
	socket := filepath.Join(n.dir, "mysqld.sock") // its path must fit in 108 bytes
	lines := []string{
		"[mysqld]",
		"datadir=" + filepath.Join(n.dir, "data"),
		"port=" + strconv.Itoa(sqlPort),
		"bind-address=127.0.0.1",
		"socket=" + socket,
		"pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"skip-name-resolve",
		"max-connections=1000",
		"innodb-buffer-pool-size=64M",
		"innodb-flush-log-at-trx-commit=2", // as Start's server: survives a kill
		"binlog_format=ROW",
		"default_storage_engine=InnoDB",
		"innodb_autoinc_lock_mode=2", // Galera requires interleaved auto-increment locks
		"wsrep_on=ON",
		"wsrep_provider=" + galeraProvider,
		"wsrep_cluster_name=" + cluster,
		"wsrep_cluster_address=gcomm://" + strings.Join(members, ","),
		fmt.Sprintf("wsrep_node_address=127.0.0.1:%d", gcomm),
		fmt.Sprintf("wsrep_node_name=n%d", i),
		// Group communication on loopback only: by default it listens on
		// every interface, and anyone who reaches it could join the cluster.
		//
		// A lost node is declared gone after 2 s (5 s by default) and
		// evicted after 4 s (15 s): the cluster cannot take a restarted
		// node back before it has let go of the node's last incarnation,
		// and on loopback nothing is slow for that long.
		fmt.Sprintf(`wsrep_provider_options="base_port=%d;gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;`+
			`evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.install_timeout=PT2S"`, gcomm, gcomm, ist),
		"wsrep_sst_method=rsync",
		fmt.Sprintf("wsrep_sst_receive_address=127.0.0.1:%d", sst),
	}
	if runAs != "" {
		lines = append(lines, "user="+runAs)
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	n.args = []string{server, "--defaults-file=" + conf}
	// Root logs in over the node's socket, which exists before any user
	// does, and the node is ready once it has joined and caught up.
	n.probeDSN = "root@unix(" + socket + ")/"
	n.synced = galeraSynced
	n.restartArgs = func(ctx context.Context) ([]string, error) { return n.recoverPosition(ctx, server, conf) }
	return nil
}

// recoverPosition finds where in the cluster's history the node's data
// ends, as Debian's galera_recovery does before systemd starts mariadbd,
// and returns the argument that starts the node there. A killed node's
// saved state says "unknown", and a node that does not know its position
// rejoins by copying a donor's whole data directory, which blocks the
// donor's writes for seconds; one that knows it is sent only what it
// missed (incremental state transfer).
func (n *Server) recoverPosition(ctx context.Context, server, conf string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(n.dir, "data", "grastate.dat")); err != nil {
		return nil, nil // never joined: nothing to recover
	}
	// mariadbd runs recovery, logs the position and exits. Its own log
	// file, not the node's: only this run's lines count.
	logFile := filepath.Join(n.dir, "recover.log")
	os.Remove(logFile)
	if err := testproc.Run(ctx, n.dir, server, "--defaults-file="+conf, "--wsrep-recover", "--log-error="+logFile); err != nil {
		return nil, fmt.Errorf("galera node: recover its position: %w", err)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		return nil, fmt.Errorf("galera node: recover its position: %w", err)
	}
	const mark = "WSREP: Recovered position:"
	for _, line := range strings.Split(string(data), "\n") {
		if _, pos, ok := strings.Cut(line, mark); ok {
			return []string{"--wsrep-start-position=" + strings.TrimSpace(pos)}, nil
		}
	}
	return nil, fmt.Errorf("galera node: recover its position: no %q in its log:\n%s", mark, data)
}

// galeraSynced is nil once the node takes queries as a synced member of
// its cluster's primary component: the bootstrapping node alone, any
// other after it joined and caught up (one that finds no other member
// does not start).
func galeraSynced(ctx context.Context, db *sql.DB) error {
	status := map[string]string{}
	rows, err := db.QueryContext(ctx, "SHOW STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state_comment')")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		status[k] = v
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if status["wsrep_ready"] != "ON" || status["wsrep_local_state_comment"] != "Synced" {
		return fmt.Errorf("galera node not synced yet: %v", status)
	}
	return nil
}

// createUser creates the tests' user on node n over its socket; Galera
// replicates it to the other nodes.
func createUser(ctx context.Context, n *Server, user, password string) error {
	db, err := sql.Open("mysql", n.probeDSN+"?multiStatements=true")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, userSQL(user, password)); err != nil {
		return fmt.Errorf("create the test user on galera node 1: %w", err)
	}
	return nil
}

// galeraUser is the user the nodes run as, "" for this process's own. Not
// root: the joiner's state transfer runs an rsync daemon, which as root
// writes as nobody and cannot fill the data directory. So as root the
// nodes run as Debian's mysql user, and their directories become its.
func galeraUser(nodes []*Server) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	if _, err := user.Lookup("mysql"); err != nil {
		return "", fmt.Errorf("%w (running as root, Galera nodes need the mysql user Debian's mariadb-server creates: %v)", ErrNotInstalled, err)
	}
	for _, n := range nodes {
		// The fixture directory is private to its creator.
		if err := os.Chmod(n.dir, 0o755); err != nil {
			return "", err
		}
		if err := chownTree(n.dir, "mysql"); err != nil {
			return "", err
		}
	}
	return "mysql", nil
}

// chownTree gives dir and everything in it to name ("" changes nothing).
func chownTree(dir, name string) error {
	if name == "" {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
