package jsontype

import "time"

// Spec is what a deployment runs, as a rollout keeps the spec it moves
// regions from and the one it moves them to. Hash is its name
// (desired.SpecHash); an empty Hash is "nothing": the spec before a new
// deployment's first.
type Spec struct {
	Image         string            `json:"image"`
	CPUMillicores int               `json:"cpu_millicores"`
	MemoryMiB     int               `json:"memory_mib"`
	Port          int               `json:"port"`
	Command       []string          `json:"command,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Hash          string            `json:"hash"`
}

// Strategy is how a change rolls out: ordered waves of regions, and what
// a failed wave does.
type Strategy struct {
	Waves []Wave `json:"waves"`
	// OnFailure is "rollback" (every promoted region returns to the spec
	// before) or "pause" (everything holds for an operator).
	OnFailure string `json:"on_failure"`
	// Checks are what every promoted region must pass for its whole
	// bake, evaluated by the region's agent against its own Prometheus
	// (daemon/gatecheck says what each means).
	Checks []Check `json:"checks,omitempty"`
}

// Check is one of a strategy's checks: a metric against a bound, a
// metric against the regions still on the previous revision (a
// baseline), or the region's firing alerts.
type Check struct {
	Name string `json:"name"`
	// Kind is "metric", "baseline" or "alert".
	Kind string `json:"kind"`
	// Query is a PromQL template (metric, baseline checks).
	Query string `json:"query,omitempty"`
	// Bound is a metric check's: "< 0.01", "<= x", "> x", ">= x", "a..b".
	Bound string `json:"bound,omitempty"`
	// Tolerance and Margin bound a baseline check: at most
	// baseline x (1 + Tolerance) + Margin.
	Tolerance float64 `json:"tolerance,omitempty"`
	Margin    float64 `json:"margin,omitempty"`
	// Match is an alert check's label matchers, a template.
	Match           string `json:"match,omitempty"`
	IntervalSeconds int    `json:"interval_seconds"`
	// FailureLimit is how many failing evaluations a region may have
	// since its promotion; MinSamples how many with a verdict it needs in
	// its bake before the check can pass.
	FailureLimit int `json:"failure_limit"`
	MinSamples   int `json:"min_samples"`
}

// Wave is regions that move together. In a stored strategy Regions may
// hold "*", every region no other wave names; a rollout's own copy lists
// the deployment's regions only.
type Wave struct {
	Regions []string `json:"regions"`
	// BakeSeconds is how long every region of the wave must stay healthy
	// before the next wave starts.
	BakeSeconds int `json:"bake_seconds"`
	// MaxFailures is how many of the wave's regions may fail it; a canary
	// wave has 0.
	MaxFailures int `json:"max_failures"`
	// DeadlineSeconds is how long a region may take from its promotion to
	// healthy before it counts as failed.
	DeadlineSeconds int `json:"deadline_seconds"`
}

// RegionRollout is one region's place in a rollout.
type RegionRollout struct {
	// State is waiting, progressing, baking, passed or failed.
	State string `json:"state"`
	// PromotedAt is when the region was given the new spec; its deadline
	// counts from here.
	PromotedAt *time.Time `json:"promoted_at,omitempty"`
	// HealthySince is when the region was last seen turning healthy; it
	// bakes from here and starts again at every unhealthy look, and when
	// its agent's stream connected again since (what happened between
	// was not watched). By the database's clock, as every time here.
	HealthySince *time.Time `json:"healthy_since,omitempty"`
	// Why is what the region waits for, or the evidence it failed on.
	Why string `json:"why,omitempty"`
	// Restarts counts the restarts of the new spec's instances since the
	// region's promotion, at the last look: any fails the region.
	Restarts int `json:"restarts,omitempty"`
	// Baseline is the restarts each pod of the new spec had already when
	// the region was promoted or resumed (by pod name; none for a fresh
	// promotion, whose pods are new): restarts count from there.
	Baseline map[string]int `json:"baseline,omitempty"`
	// Version is the newest change of the deployment in the region when
	// it was promoted: its agent must have applied it to run the spec.
	Version uint64 `json:"version,omitempty"`
}
