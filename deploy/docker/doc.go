// Package docker holds the daemons' Dockerfiles. There is no Docker engine
// on the machines this project is built on, so its test checks what the
// Dockerfiles promise without one: a build stage on the Go version go.mod
// asks for, a final stage that runs as a non-root user and starts the
// daemon, and a build command that really produces a static binary of that
// daemon (it is run here, as the build stage would run it).
package docker
