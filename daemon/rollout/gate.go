package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// Instance is what an agent last reported of one pod of the deployment.
type Instance struct {
	Pod      string
	SpecHash string
	Ready    bool
	Status   string // pending, running, failed, unknown
	Reason   string // why not ready, as the agent saw it
	Restarts int
	// Evidence is what a crashed container said before it died (its
	// termination message or last lines of log), as the agent reported.
	Evidence string
}

// Region is what the driver knows of one region of a deployment at one
// look: the topology, the region's serving state, the agent's apply
// report, and the instances.
type Region struct {
	// Present: the deployment still has a topology in the region.
	Present  bool
	Stopped  bool
	Replicas int
	// Paused and Connected are the region's: paused by an operator, its
	// agent connected (heard from within regionhealth.AgentSilence).
	Paused, Connected bool
	// Heard is the agent's last heartbeat, which it sends only after
	// reporting every change of its Pods it saw: the instances are what
	// ran up to then. ConnectedSince is when its stream connected; a
	// bake that began before missed what happened in between (a ctrld
	// restart, the agent moved to another replica or restarted). Both by
	// the database's clock; zero while not connected.
	Heard, ConnectedSince time.Time
	// Applied is the stream version of the last change of the deployment
	// the agent applied in the region, Received the newest it received,
	// InSync whether that one is applied, ApplyError the error of its
	// failing apply.
	Applied, Received uint64
	InSync            bool
	ApplyError        string
	Instances         []Instance
	// Checks are the evaluations of the rollout's checks in the region,
	// by check, oldest first.
	Checks map[string][]Evaluation
}

// Verdict is a region's gate at one look.
type Verdict int

// Verdicts.
const (
	// Waiting: not healthy yet (or not any more), nothing failed.
	Waiting Verdict = iota
	Healthy
	Failed
)

// fatalReasons are instance states the region fails on at once: waiting
// cannot mend them, and a canary that shows one has shown enough.
var fatalReasons = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "OOMKilled", "InvalidImageName", "CreateContainerConfigError"}

// nothingRuns ends what a region that runs no instance of the new spec
// says: it proves nothing, so it holds its wave until its deadline fails
// it, unless the operator acts.
const nothingRuns = "nothing runs the new spec: start or scale it, or promote by hand"

// Gate judges a region promoted to the spec named hash, whose place in
// the rollout is st (the change it was promoted by, its pods' restarts
// then), and says why when it is not healthy, with the evidence. It also
// returns how often the new spec's instances restarted since the
// promotion.
//
// Only what runs proves anything: a region stopped, scaled to 0 or no
// longer running the deployment is never healthy, and a restart of any
// instance of the new spec since the promotion fails it, counted pod by
// pod (a pod replaced meanwhile cannot hide another's restart).
func Gate(r Region, hash string, st jsontype.RegionRollout) (Verdict, string, int) {
	if !r.Present {
		return Waiting, "the deployment no longer runs here: " + nothingRuns, 0
	}
	if r.ApplyError != "" && r.Received >= st.Version {
		return Failed, "apply failed: " + r.ApplyError, 0
	}
	restarts := 0
	var restarted []string
	counts := map[string]int{}
	evidence := "" // of the first failing instance that has some
	ready, other := 0, 0
	for _, in := range r.Instances {
		if in.SpecHash != hash {
			other++
			continue
		}
		if n := in.Restarts - st.Baseline[in.Pod]; n > 0 {
			restarts += n
			restarted = append(restarted, fmt.Sprintf("%s (%d)", in.Pod, n))
		}
		if evidence == "" && (in.Restarts > st.Baseline[in.Pod] || slices.Contains(fatalReasons, in.Reason) || in.Status == "failed") {
			evidence = in.Evidence
		}
		switch {
		case slices.Contains(fatalReasons, in.Reason):
			counts[in.Reason]++
		case in.Status == "failed":
			counts["Failed"]++
		case in.Ready && in.Status == "running":
			ready++
		}
	}
	if len(counts) > 0 {
		return Failed, describe(counts, len(r.Instances), restarts) + quoted(evidence), restarts
	}
	if len(restarted) > 0 {
		slices.Sort(restarted)
		return Failed, fmt.Sprintf("instances of the new spec restarted since the region's promotion: %s", strings.Join(restarted, ", ")) + quoted(evidence), restarts
	}
	switch {
	case r.Stopped:
		return Waiting, "stopped: " + nothingRuns, restarts
	case r.Paused:
		return Waiting, "the region is paused", restarts
	case !r.Connected:
		return Waiting, "the region's agent is not connected", restarts
	case r.Applied < st.Version || !r.InSync:
		return Waiting, "the agent has not applied the change yet", restarts
	case r.Replicas == 0:
		return Waiting, "scaled to 0: " + nothingRuns, restarts
	case ready < r.Replicas || other > 0:
		why := fmt.Sprintf("%d of %d instances ready on the new spec", ready, r.Replicas)
		if other > 0 {
			why += fmt.Sprintf(", %d still on another", other)
		}
		return Waiting, why, restarts
	}
	return Healthy, fmt.Sprintf("%d of %d instances ready on the new spec", ready, r.Replicas), restarts
}

// describe is the evidence of a failed gate: "3 of 3 instances
// CrashLoopBackOff (restarts 5)".
func describe(counts map[string]int, total, restarts int) string {
	var parts []string
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d of %d instances %s", counts[reason], total, reason))
	}
	s := strings.Join(parts, ", ")
	if restarts > 0 {
		s += fmt.Sprintf(" (restarts %d)", restarts)
	}
	return s
}

// maxQuotedEvidence bounds the evidence a gate's verdict quotes: the
// halt's reason, its audit record and the views carry it.
const maxQuotedEvidence = 240

// quoted is evidence as the verdict ends with it, `: "panic: ..."`, on
// one line; "" without any.
func quoted(evidence string) string {
	ev := strings.Join(strings.Fields(evidence), " ")
	if ev == "" {
		return ""
	}
	if len(ev) > maxQuotedEvidence {
		ev = strings.ToValidUTF8(ev[:maxQuotedEvidence], "") + "…"
	}
	return ": " + strconv.Quote(ev)
}
