package convergecheck

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/testmariadb"
)

var (
	seedFlag     = flag.Uint64("convergecheck.seed", 0, "replay this seed (0: draw a new one)")
	roundsFlag   = flag.Int("convergecheck.rounds", 3, "rounds to run (unless -convergecheck.duration is set)")
	durationFlag = flag.Duration("convergecheck.duration", 0, "run rounds until this much time has passed (e.g. 30m; raise -timeout too)")
)

// One real control plane per region, with workloads (controller manager,
// scheduler, kwok), shared by the package's tests; each run starts by
// removing what the one before left.
var (
	euCluster = kubetest.Shared{Options: kubetest.Options{Workloads: true}}
	usCluster = kubetest.Shared{Options: kubetest.Options{Workloads: true}}
)

func TestMain(m *testing.M) {
	// The MariaDB restart fault makes the driver log every broken pooled
	// connection it drops; they are expected, and ctrld retries.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(kubetest.RunShared(m, &euCluster, &usCluster))
}

func clusters(t *testing.T) map[string]*kubetest.Cluster {
	return map[string]*kubetest.Cluster{"eu": euCluster.Get(t), "us": usCluster.Get(t)}
}

// The whole system under random operations and faults converges after
// every round. By default a few rounds for CI; -convergecheck.duration runs
// for as long as asked.
func TestConvergence(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	// A failure in round R replays with the same seed and R rounds: the
	// rounds before it made the state it started from.
	failedRound := 0
	replay := func() string {
		return replayLine(seed, failedRound)
	}
	t.Cleanup(func() {
		if t.Failed() && failedRound == 0 {
			t.Log(replay()) // failed before the checker's verdict: setup, or a fault that could not be injected
		}
	})
	setup := Setup{Clusters: clusters(t), Logf: t.Logf}
	// Without mariadbd (outside CI only): on the shared test server,
	// without the MariaDB restart fault.
	setup.MariaDB = testmariadb.Own(t)
	t.Logf("seed %d", seed)
	// Every round stops a region's Prometheus for a while: checked
	// rollouts meet an outage in every round.
	rep, err := Run(t, setup, Config{Seed: seed, Rounds: *roundsFlag, Duration: *durationFlag, Each: []string{FaultPrometheus}})
	t.Logf("report: %s", rep)
	if err != nil {
		failedRound = rep.Rounds + 1
		t.Fatalf("%v\n%s", err, replay())
	}
	if weak := rep.ProvesLittle(true); len(weak) > 0 {
		t.Fatalf("converged, but the run proves little:\n  %s\n%s", strings.Join(weak, "\n  "), replay())
	}
}

// The whole system on a 3-node Galera cluster converges after every round:
// ctrld on node 1, the replica fault's second ctrld on node 2 or 3, the
// MariaDB restart fault killing and restarting any node, both in every
// round. Two rounds in CI
// (the cluster takes 20-40 s to start); -convergecheck.seed replays.
func TestConvergenceOnGalera(t *testing.T) {
	g := testmariadb.OwnGalera(t)
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d", seed)
	rep, err := Run(t, Setup{Clusters: clusters(t), Galera: g, Logf: t.Logf},
		Config{Seed: seed, Rounds: 3, Each: []string{FaultMariaDB, FaultReplica}})
	t.Logf("report: %s", rep)
	replay := fmt.Sprintf("replay: go test ./internal/convergecheck -run '^TestConvergenceOnGalera$' -timeout=0 -convergecheck.seed=%d", seed)
	if err != nil {
		t.Fatalf("%v\n%s", err, replay)
	}
	if weak := rep.ProvesLittle(true); len(weak) > 0 {
		t.Fatalf("converged, but the run proves little:\n  %s\n%s", strings.Join(weak, "\n  "), replay)
	}
	// A replica move is skipped when its node is down at the time; a node
	// restart never is.
	if rep.Faults[FaultMariaDB] < 3 {
		t.Fatalf("converged, but only %d Galera node restarts in 3 rounds, want one a round\n%s", rep.Faults[FaultMariaDB], replay)
	}
}

// replayLine is the command that replays a run of seed; a failure in round
// R replays R rounds (the rounds before it made the state it started
// from), without go test's time limit.
func replayLine(seed uint64, failedRound int) string {
	cmd := fmt.Sprintf("replay: go test ./internal/convergecheck -run '^TestConvergence$' -timeout=0 -convergecheck.seed=%d", seed)
	also := fmt.Sprintf("go tool task chaos -- --converge-seed %d", seed)
	if failedRound > 3 {
		cmd += fmt.Sprintf(" -convergecheck.rounds=%d", failedRound)
		also += fmt.Sprintf(" --converge-rounds %d", failedRound)
	}
	return cmd + "\n    (or: " + also + ")"
}

// The checker can fail: against a system whose agents never get a delete
// it must report the objects left behind. A round whose random operations
// deleted or stopped nothing that had been applied would prove nothing, so
// a few seeds get a chance, as in daemon/stream's gap test.
func TestCheckerReportsDivergence(t *testing.T) {
	cs := clusters(t)
	const attempts = 3
	for attempt := range attempts {
		var err error
		t.Run("attempt", func(t *testing.T) {
			_, err = Run(t, Setup{Clusters: cs, DropDeletes: true, Logf: t.Logf}, Config{
				Seed: uint64(attempt + 1), Rounds: 1, RoundLength: 4 * time.Second,
				ConvergeWithin: 10 * time.Second, Faults: []string{},
			})
		})
		var div *DivergenceError
		if !errors.As(err, &div) {
			t.Logf("attempt %d: no divergence reported (err %v)", attempt+1, err)
			continue
		}
		for _, p := range div.Problems {
			if strings.Contains(p, ": extra ") {
				t.Logf("reported as expected:\n%v", div)
				return
			}
		}
		t.Fatalf("a divergence, but no object left behind named:\n%v", div)
	}
	t.Fatalf("the checker reported no divergence of a system that drops every delete in %d runs", attempts)
}
