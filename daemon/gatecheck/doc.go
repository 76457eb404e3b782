// Package gatecheck owns what a rollout's checks mean: which checks a
// strategy may hold (each query parsed with Prometheus' own parser when
// the strategy is set), the query a region's agent evaluates for one
// deployment (its identity filled in as escaped PromQL strings, so that
// no ID can change what the query asks), and the verdict of one
// evaluation against the check's bound or its baseline.
//
// It computes; it reads and writes nothing. daemon/cluster asks it what
// to assign an agent and how to judge what the agent sends back;
// daemon/desired asks it whether a strategy's checks are sound;
// daemon/rollout's gate counts the verdicts.
package gatecheck
