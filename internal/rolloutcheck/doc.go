// Package rolloutcheck proves rollouts end to end on real parts: ctrld on
// MariaDB, one real API server with kwok per region, one agent per region.
// Its ImageLog is what the clusters themselves say: every image, environment
// and status (replicas ready and updated) each StatefulSet had, and every
// Pod's readiness and restart count, read through watches that start before
// the first change, not from ctrld's view. The convergence checker uses it for its
// rollout verdict (internal/convergecheck); this package's test walks a
// good and a bad image through three regions.
package rolloutcheck
