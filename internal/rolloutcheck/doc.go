// Package rolloutcheck proves rollouts end to end on real parts: ctrld on
// MariaDB, one real API server with kwok per region, one agent per region.
// Its ImageLog is what the clusters themselves say: every image each
// StatefulSet carried, read through a watch that starts before the first
// change, not from ctrld's view. The convergence checker uses it for its
// rollout verdict (internal/convergecheck); this package's test walks a
// good and a bad image through three regions.
package rolloutcheck
