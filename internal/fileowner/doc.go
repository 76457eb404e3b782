// Package fileowner tells who owns a file and whether this process is in
// a group: what the checks of secret files' modes need (agent and operator
// token files in internal/dial, the SSH host key in tui/sshserve), which
// allow a root-owned file readable by a group this process is in (a
// Kubernetes Secret mounted with the pod's fsGroup).
package fileowner
