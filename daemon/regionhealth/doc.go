// Package regionhealth reads each region's sync health from the database —
// its head version, the acked cursor of the agent that speaks for it, the
// changes above that cursor and the oldest one's age, whether that agent is
// connected and when it last reported, whether the region is paused and
// since when, which resources its agent reports failing to apply — says
// why a region or a resource in it is not in sync (Why, WhyResource) and
// why a deployment's instances there are not ready, in their agent's words
// (ReadInstances, WhyInstances: "3 of 3 instances CrashLoopBackOff
// (restarts 5)"), and publishes it as ctrld's per-region gauges.
//
// The operator views (the console) and the gauges (the alerts) read the
// same numbers through Read, so they cannot disagree: a paused region, or
// one whose agent died, shows the same lag on both. The gauges do not wait
// for an agent's heartbeat; a Publisher computes them from the database
// every few seconds, with a handful of indexed queries whatever the number
// of regions and agents. Every ctrld replica publishes the same values from
// the same database; a region that is no longer registered loses its
// series.
package regionhealth
