// Package rollout drives rollouts: every ctrld replica runs a Driver,
// which reads the rollouts in flight and what the agents report of their
// regions, and decides each rollout's next step: a region turning
// healthy, baking or failing its gate, the next wave promoted, or a halt.
// The steps themselves are daemon/desired's (StepRollout), one
// transaction each, conditional on the rollout's version: replicas that
// decide the same step race on that row and one of them writes it, on
// one server and on every node of a Galera cluster, where row locks and
// GET_LOCK hold on one node only but certification fails the second
// writer of a row.
//
// A region passes its gate when, for the wave's whole bake time, its
// agent has applied the promotion's change, every instance runs the new
// spec (the hash its pods carry) and is ready, and none restarted. It
// fails at once when an apply of the deployment fails or an instance of
// the new spec crash-loops, cannot pull its image, was OOM-killed or
// failed, and when its deadline passes before it turned healthy. A paused
// region or one whose agent is away holds the wave: it is neither healthy
// nor failed, and its deadline runs.
package rollout
