// Package testproc runs the server processes tests start themselves (the
// Kubernetes control planes of internal/kubetest, the convergence checker's
// own MariaDB) so that none outlives the test binary.
//
// Every fixture gets a directory of its own under one state root, named
// for the test binary that owns it. A process started in it runs in its own
// process group with a parent-death signal, logs to <dir>/<name>.log and
// has its pid recorded in <dir>/pids; a killed test binary runs no cleanup,
// so the next ReapStale kills what it left running and removes its
// directories. Every child must name its directory in its command line:
// that is how a recorded pid is told from a reused one.
package testproc
