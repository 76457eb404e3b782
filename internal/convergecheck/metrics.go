package convergecheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/trafficsim"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ErrorsImage's Pods are Ready as a good image's are, but the traffic
// simulator fails a fifth of their requests (internal/trafficsim's
// ":errors"): only a metric check tells. Operators roll it out only under
// a strategy with the error-rate check, so it may never reach the second
// wave: the canary's check fails it, or, its Prometheus down, holds it
// until its deadline fails it.
var ErrorsImage = "ghcr.io/acme/app:" + trafficsim.ErrorsTag

// The checker's one check: the new spec's share of failed requests in the
// region, as the README's and internal/rolloutcheck's error-rate check,
// with few samples so that it decides within the 6 s bake (MinBake).
const (
	errorRateCheck   = "error-rate"
	checkInterval    = time.Second
	checkMinSamples  = 2
	errorRateBound   = "< 0.05"
	simulatedQueries = `namespace={{namespace}},deployment={{deployment}},spec_hash={{spec_hash}}`
)

// errorRateChecks are the checks a checked strategy carries.
func errorRateChecks() []*ctrlv1.RolloutCheck {
	return []*ctrlv1.RolloutCheck{{Name: errorRateCheck, Kind: "metric", Bound: errorRateBound,
		Interval: durationpb.New(checkInterval), MinSamples: checkMinSamples,
		Query: `sum(rate(` + trafficsim.RequestsMetric + `{` + simulatedQueries + `,code="500"}[5s])) / sum(rate(` +
			trafficsim.RequestsMetric + `{` + simulatedQueries + `}[5s]))`}}
}

// checked tells whether a rollout's strategy carries the error-rate check.
func checked(r *ctrlv1.Rollout) bool {
	for _, c := range r.GetStrategy().GetChecks() {
		if c.GetName() == errorRateCheck {
			return true
		}
	}
	return false
}

// mustFail tells whether a rollout's new image must fail its first wave:
// one whose Pods crash, or ErrorsImage under the error-rate check.
func mustFail(r *ctrlv1.Rollout, image string) bool {
	return failingImage(image) || image == ErrorsImage && checked(r)
}

// regionMetrics is a region's traffic simulator and Prometheus (scraping
// it every second, promtest), and the outages the fault schedule gave
// that Prometheus.
type regionMetrics struct {
	prom       *promtest.Server
	restarting atomic.Bool // an outage is under way

	mu      sync.Mutex
	outages []promOutage
}

// promOutage is a stretch during which the region's Prometheus surely
// ran no process: from after Stop returned (killed and gone) to before
// Start was called (up zero: not yet).
type promOutage struct{ down, up time.Time }

// startMetrics starts a region's traffic simulator against its API
// server, served on a local port, and a Prometheus scraping it. The
// simulator stops with ctx; call the returned Server's Close when done.
func startMetrics(ctx context.Context, kube kubernetes.Interface) (*regionMetrics, func(), error) {
	addr, stop, err := trafficsim.Serve(ctx, kube, trafficsim.Options{})
	if err != nil {
		return nil, nil, err
	}
	prom, err := promtest.Start(ctx, promtest.Options{Targets: []string{addr}})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &regionMetrics{prom: prom}, func() { prom.Close(); stop() }, nil
}

// outage stops the Prometheus (SIGKILL), keeps it down for hold (or
// until ctx ends) and starts it again on its data, recording the outage.
func (m *regionMetrics) outage(ctx context.Context, hold time.Duration) error {
	m.prom.Stop()
	m.mu.Lock()
	m.outages = append(m.outages, promOutage{down: time.Now()})
	i := len(m.outages) - 1
	m.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	m.mu.Lock()
	m.outages[i].up = time.Now()
	m.mu.Unlock()
	if err := m.prom.Start(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("start Prometheus again: %w\n%s", err, m.prom.LogTail())
	}
	return nil
}

// outageLog is a copy of the outages so far.
func (m *regionMetrics) outageLog() []promOutage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]promOutage(nil), m.outages...)
}

// syncCall is one SyncChecks call of a region's agent that ctrld answered:
// when it began and ended (the checker's clock), the results it carried
// (by assignment ID, whether each had a value) and the assignments ctrld
// answered with. ctrld stores the results of the queries it assigns the
// region when the call comes in, and answers with those same assignments
// (daemon/cluster's SyncChecks), so a result whose ID is in assigned was
// stored before end.
type syncCall struct {
	start, end time.Time
	results    map[string]bool
	assigned   map[string]bool
}

// checkLog is what the checks verdict reads of a region: its agent's
// answered SyncChecks calls and its Prometheus' outages.
type checkLog struct {
	calls   []syncCall
	outages []promOutage
}

// downThroughout returns the outage during which the Prometheus surely
// ran no process from from to to, if there was one.
func (l checkLog) downThroughout(from, to time.Time) (promOutage, bool) {
	for _, o := range l.outages {
		if !o.down.After(from) && (o.up.IsZero() || !o.up.Before(to)) {
			return o, true
		}
	}
	return promOutage{}, false
}

// Slack of the checks verdict (noVerdictPass), each in the checker's
// favour, that is against finding a violation.
const (
	// lookSlack: a call must have ended this long before a look's time
	// for the verdict to take its results as read by that look (the
	// look's reads come after its time; Galera applies a write another
	// node committed before a read with wsrep_sync_wait waits for it).
	lookSlack = 250 * time.Millisecond
	// answerSlack: how long before the agent kept a result Prometheus may
	// have sent its answer (decoding it, a descheduled goroutine, the
	// last bytes a killed server had written).
	answerSlack = time.Second
)

// assignmentID is the ID daemon/cluster gives the query a promoted region
// evaluates for a rollout's check of the new spec (its canary role).
func assignmentID(r *ctrlv1.Rollout, check string) string {
	return fmt.Sprintf("%d/%s/canary", r.GetId(), check)
}

// checkPass is what noVerdictPass found of one pass.
type checkPass struct {
	judged bool
	// afterOutage: the earlier region's Prometheus was down at some time
	// between its promotion and the pass; sinceUp is then how long before
	// the pass it was last started again (negative: it was not).
	afterOutage bool
	sinceUp     time.Duration
}

// errNoEvaluation is what noVerdictPass says of a pass of a checked wave
// whose region's agent never got a result of the check stored.
var errNoEvaluation = errors.New("no evaluation of the check from its agent was stored before")

// noVerdictPass holds one pass of a checked rollout, a later wave's region
// given the new spec (p) after an earlier one (p.earlier) passed its
// check, to "no wave passes on an inconclusive check", judged on the
// earlier region's Prometheus' outages, which the checker made, and on
// what its agent sent, not on ctrld's account. It returns the violation
// ("" for none).
//
// The gate passes a region only when the check's newest evaluation (by
// the time ctrld stored it) has a verdict, and an evaluation made while
// the Prometheus was down has none. So at the look that passed the
// earlier region, the newest evaluation it read was answered by a running
// Prometheus. When was that answer given, at the earliest? The look's
// time is the later region's promotion (PromotedAt), and its StatefulSet
// turned to the new spec after the look had committed (carried). Let d be
// the last call of the earlier region's agent that ended, lookSlack
// before the look's time, with a result of the check that ctrld stored
// (its ID among the call's assignments): the look read that result or a
// newer one. The agent sends, with each call, what completed since its
// last answered call began (the runner takes its pending results as a
// call begins, keeps them for the next call when the call fails, and
// starts evaluations only once a call is answered). So every result of d
// or of a later call completed after the answered call before d (s)
// began, and Prometheus answered it after s's start less answerSlack.
// If the Prometheus was down throughout from then until the StatefulSet
// turned, the wave passed on an evaluation with no verdict: a violation.
//
// With the agent's calls answered on their 2 s cadence and the check due
// at each (its interval of 1 s), d ended at most one cadence before the
// look and s began one cadence before d: the answer was given at most one
// evaluation interval (rounded up to the cadence) plus one cadence, 4 s,
// before the look. A ctrld or database restart, a replica move or a
// killed agent makes calls fail or stop, and the bound stretches over the
// gap by itself, as the evaluation the gate last read grows older: the
// verdict assumes no cadence, so it does not turn flaky when faults meet.
//
// No stored result at all before the look is a violation too (the gate
// has no evaluation to pass on); one whose call may have been stored just
// in time is not judged.
func noVerdictPass(r *ctrlv1.Rollout, p pass, check string, l checkLog) (string, checkPass) {
	var found checkPass
	a := p.earlier
	id := assignmentID(r, check)
	look := p.later.GetPromotedAt().AsTime()
	upTo := p.carried
	if p.later.GetPromotedAt() == nil || upTo.Before(look) {
		return "", found // a StatefulSet on the new spec before its promotion: the promise verdict speaks
	}
	stored := -1 // the index of d in l.calls
	late := false
	for i, c := range l.calls {
		if !c.assigned[id] {
			continue
		}
		if _, ok := c.results[id]; !ok {
			continue
		}
		if !c.end.After(look.Add(-lookSlack)) {
			stored = i
		} else if c.start.Before(upTo) {
			late = true // ended too close to the look to tell whether it read it
		}
	}
	if a.GetPromotedAt() != nil {
		from := a.GetPromotedAt().AsTime()
		for _, o := range l.outages {
			if o.down.Before(upTo) && (o.up.IsZero() || o.up.After(from)) {
				found.afterOutage = true
				found.sinceUp = -1
				if !o.up.IsZero() && !o.up.After(look) {
					found.sinceUp = look.Sub(o.up)
				}
			}
		}
	}
	what := fmt.Sprintf("rollout of %s to revision %d (%s): %s (wave %d) got the new spec at %s (promoted %s) after %s (wave %d) passed its check %s",
		r.GetDeploymentId(), r.GetRevision(), r.GetState(), p.later.GetRegion(), p.later.GetWave(), stamp(upTo), stamp(look),
		a.GetRegion(), a.GetWave(), check)
	switch {
	case stored < 0 && !late:
		found.judged = true
		return fmt.Sprintf("%s, yet %s: %v the pass", what, a.GetRegion(), errNoEvaluation), found
	case stored <= 0:
		return "", found // no answered call before d in the record: nothing to bound the answer by
	}
	found.judged = true
	d, s := l.calls[stored], l.calls[stored-1]
	earliest := s.start.Add(-answerSlack)
	if o, down := l.downThroughout(earliest, upTo); down {
		up := "still down"
		if !o.up.IsZero() {
			up = "started again at " + stamp(o.up)
		}
		return fmt.Sprintf("%s, yet %s's Prometheus was down from %s (%s): the newest result of the check the gate could have read came with the SyncChecks call of %s-%s, "+
			"so Prometheus answered it after %s, when it was down: the wave passed on an evaluation with no verdict",
			what, a.GetRegion(), stamp(o.down), up, stamp(d.start), stamp(d.end), stamp(earliest)), found
	}
	return "", found
}
