package convergecheck

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A match found just before the deadline has not held for settle: it is
// no convergence.
func TestConvergeDemandsTheMatchHeld(t *testing.T) {
	const within = 1200 * time.Millisecond
	start := time.Now()
	lateMatch := func(context.Context) verdict {
		if time.Since(start) < within-300*time.Millisecond {
			return verdict{problems: []string{"eu: missing StatefulSet acme-prod/api"}}
		}
		return verdict{desired: 2}
	}
	took, v := converge(context.Background(), within, lateMatch)
	if len(v.problems) == 0 || !strings.Contains(v.problems[0], "not the "+settle.String()) {
		t.Fatalf("a match of the last few hundred milliseconds counted as converged after %s (problems %q)", took, v.problems)
	}
}

// The schedule returns only once the slow restarts it began are over,
// whether it ends normally, with a failed step, or with a step ending the
// test (t.Fatal): a restart that outlived its round would log after its
// test, or meet a stopped database or cluster.
func TestScheduleWaitsForSlowRestarts(t *testing.T) {
	ends := map[string]func(context.Context) (bool, error){
		"normally":                    func(context.Context) (bool, error) { return true, nil },
		"with a failed step":          func(context.Context) (bool, error) { return false, errors.New("broken") },
		"with a step ending the test": func(context.Context) (bool, error) { runtime.Goexit(); return false, nil },
	}
	for how, end := range ends {
		s := &System{logf: t.Logf, slowCtx: context.Background()}
		var busy, restarted atomic.Bool
		steps := []step{
			{fault: FaultAPIServer, what: "restart, slowly", do: func(context.Context) (bool, error) {
				return s.background(&busy, "slow restart", func(context.Context) error {
					time.Sleep(300 * time.Millisecond)
					restarted.Store(true)
					return nil
				}), nil
			}},
			{fault: FaultStreamCut, what: "end the schedule " + how, do: end},
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runSchedule(context.Background(), time.Now(), steps, map[string]int{})
		}()
		<-done
		if !restarted.Load() {
			t.Errorf("ended %s: the schedule returned with a restart still under way", how)
		}
	}
}

// A run that converged but injected no fault, changed almost nothing,
// compared an empty desired state, ended no rollout or judged no fleet
// control is named as proving little.
func TestReportThatProvesLittleIsNamed(t *testing.T) {
	empty := Report{Rounds: 3, Ops: map[string]OpStats{"deploy": {Rejected: 40, Failed: 10}}, Desired: []int{0, 0, 0}}
	if weak := empty.ProvesLittle(true); len(weak) != 5 {
		t.Errorf("a run with no fault, no successful call, nothing desired, no rollout and no fleet control: %q, want five complaints", weak)
	}
	if weak := empty.ProvesLittle(false); len(weak) != 4 {
		t.Errorf("without faults asked for, their absence is no complaint: %q", weak)
	}
	good := Report{Rounds: 3, Faults: map[string]int{FaultAgentKill: 2, FaultMariaDB: 1},
		Ops: map[string]OpStats{"deploy": {OK: 30, Rejected: 40, Failed: 10}}, Desired: []int{0, 6, 4},
		Rollouts: RolloutStats{Succeeded: 2, RolledBack: 1},
		Fleet:    FleetStats{Halts: 2, Windows: 1, Starts: 9}}
	if weak := good.ProvesLittle(true); len(weak) != 0 {
		t.Errorf("a run that did its work: %q", weak)
	}
	noWindow := good
	noWindow.Fleet.Windows = 0
	if weak := noWindow.ProvesLittle(true); len(weak) != 1 {
		t.Errorf("a run that set no freeze window: %q, want one complaint", weak)
	}
	// Calls a database restart left unanswered count in neither share;
	// other failures do.
	outage := good
	outage.Ops = map[string]OpStats{"deploy": {OK: 30, Rejected: 40, Failed: 110, InOutage: 100}}
	if weak := outage.ProvesLittle(true); len(weak) != 0 {
		t.Errorf("a run whose extra failures all fell in a database outage: %q", weak)
	}
	outage.Ops = map[string]OpStats{"deploy": {OK: 30, Rejected: 40, Failed: 110, InOutage: 10}}
	if weak := outage.ProvesLittle(true); len(weak) != 1 {
		t.Errorf("a run whose calls mostly failed outside an outage: %q, want one complaint", weak)
	}
}

// Only unanswered calls made while the database is down count as the
// outage's: a call refused as invalid then is still the system's failure.
func TestOnlyUnansweredCallsCountAsTheOutages(t *testing.T) {
	down := false
	c := opCounter{inOutage: func() bool { return down }}
	c.add("deploy", status.Error(codes.Unavailable, "database unavailable"))
	down = true
	c.add("deploy", status.Error(codes.Unavailable, "database unavailable"))
	c.add("deploy", status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	c.add("deploy", status.Error(codes.InvalidArgument, "replicas must not be negative"))
	if got := *c.ops["deploy"]; got != (OpStats{Failed: 4, InOutage: 2}) {
		t.Errorf("got %+v, want 4 failed, 2 of them in the outage", got)
	}
}

// The pools send only valid requests: one refused as invalid is a failure
// of the system, not one of the refusals the pools make on purpose.
func TestInvalidCallsCountAsFailed(t *testing.T) {
	var c opCounter
	c.add("deploy", status.Error(codes.InvalidArgument, "replicas must not be negative"))
	c.add("deploy", status.Error(codes.NotFound, "no deployment api"))
	if got := *c.ops["deploy"]; got != (OpStats{Rejected: 1, Failed: 1}) {
		t.Errorf("one invalid, one not found: %+v, want 1 rejected and 1 failed", got)
	}
}

// A call naming a reserved pair counts as rejected when ctrld refuses it
// as invalid; accepted (or refused for another reason) it is a violation,
// which fails the round; unanswered it merely failed.
func TestAReservedPairAcceptedIsAViolation(t *testing.T) {
	var c opCounter
	c.addRefusal("reserved-pair", "deploy of kube/system", status.Error(codes.InvalidArgument, "workspace_id, environment_id: invalid"))
	c.addRefusal("reserved-pair", "sentinel of kube/public", status.Error(codes.Unavailable, "ctrld down"))
	if len(c.violations) != 0 {
		t.Errorf("violations %q after a refusal and an outage", c.violations)
	}
	c.addRefusal("reserved-pair", "policy of kube-node/lease", nil)
	c.addRefusal("reserved-pair", "deploy of kube/system", status.Error(codes.FailedPrecondition, "namespace taken"))
	if s := *c.ops["reserved-pair"]; s.OK != 1 || s.Rejected != 1 || s.Failed != 2 || len(c.violations) != 2 {
		t.Errorf("counted %+v with violations %q, want 1 ok, 1 rejected, 2 failed and 2 violations", s, c.violations)
	}
}
