// Package operator implements the gRPC OperatorService the console and
// scripts use: read-only views of sync health (regions, lag, pending
// changes, desired vs actual) and the actions on-call engineers take
// (deploy, start/stop, scale, sentinels and policies, force resync,
// pause/resume). Every action is recorded in the audit log with the
// operator's token name and its outcome, and bad input comes back as
// InvalidArgument naming the field, with nothing written.
package operator
