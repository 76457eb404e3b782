package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Instance is what an agent last reported of one pod of the deployment.
type Instance struct {
	SpecHash string
	Ready    bool
	Status   string // pending, running, failed, unknown
	Reason   string // why not ready, as the agent saw it
	Restarts int
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
	// agent connected.
	Paused, Connected bool
	// Applied is the stream version of the last change of the deployment
	// the agent applied in the region, Received the newest it received,
	// InSync whether that one is applied, ApplyError the error of its
	// failing apply.
	Applied, Received uint64
	InSync            bool
	ApplyError        string
	Instances         []Instance
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

// Gate judges a region promoted to the spec named hash by its change at
// version, and says why when it is not healthy, with the evidence. The
// restart count of the new spec's instances is returned for the bake:
// a rise while baking fails the region.
func Gate(r Region, hash string, version uint64) (Verdict, string, int) {
	switch {
	case !r.Present:
		return Healthy, "the deployment no longer runs here", 0
	case r.Stopped:
		// Nothing runs to prove anything (its agent deleted the workload
		// and its sync record): the spec is in place for a start.
		return Healthy, "stopped: nothing runs", 0
	}
	if r.ApplyError != "" && r.Received >= version {
		return Failed, "apply failed: " + r.ApplyError, 0
	}
	restarts := 0
	counts := map[string]int{}
	ready, other := 0, 0
	for _, in := range r.Instances {
		if in.SpecHash != hash {
			other++
			continue
		}
		restarts += in.Restarts
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
		return Failed, describe(counts, len(r.Instances), restarts), restarts
	}
	switch {
	case r.Paused:
		return Waiting, "the region is paused", restarts
	case !r.Connected:
		return Waiting, "the region's agent is not connected", restarts
	case r.Applied < version || !r.InSync:
		return Waiting, "the agent has not applied the change yet", restarts
	case r.Replicas == 0:
		return Healthy, "scaled to 0", restarts
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
