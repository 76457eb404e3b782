// Package fleet owns what the fleet's controls mean: halts, freeze
// windows and pacing bounds, which hold rollouts across deployments, and
// the plan that says, at one time, which rollouts may start a wave and
// why each of the others waits.
//
// A hold applies where a wave starts: a rollout's first (it waits queued
// until nothing holds it) and each next one (its baked wave stays where
// it is). Halts also pause the rollouts in flight in their scope when
// they are made (daemon/desired writes that). Scale, start and stop are
// not rollouts and are never held.
//
//   - A halt holds every wave in its scope: everything, an environment,
//     or the waves that have a region.
//   - A freeze window holds every wave in its scope (an environment, or
//     all) while it is closed: recurring, as a cron schedule in a time
//     zone whose every firing closes it for a duration (the schedules
//     are read by robfig/cron, Kubernetes CronJob's own parser), or once.
//   - A pacing bound holds a first wave while its environment has max
//     rollouts started and in flight, or while a region of it has max
//     first waves in progress; those beyond wait in the order they were
//     made.
//   - A rollout taken through by an operator on purpose (break-glass,
//     with a reason) is held by none of them.
//
// Plan is a pure function of the State and the time (the database's,
// which all replicas share), so the driver, the start of a rollout and
// every view say the same. Read reads a State; in a transaction that
// starts a wave it locks the fleet_control row first, so that what it
// reads stays true until it commits (see ent/schema/fleet.go).
package fleet
