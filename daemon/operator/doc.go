// Package operator implements the gRPC OperatorService the console and
// scripts use: read-only views of sync health (regions, lag, pending
// changes, desired vs actual) and the actions on-call engineers take
// (deploy, start/stop, scale, sentinels and policies, force resync,
// pause/resume), and rollouts: their state, an operator's pause, resume,
// promote and abort, environments' strategies and a call's own strategy
// for its deploy, update or rollback (rollouts.go). Every action is recorded in the audit log with the
// operator's token name and its outcome, and bad input comes back as
// InvalidArgument naming the field, with nothing written. Writes that
// authentication refused are on record too, gathered in memory and
// written as one record per token, method and reason each window, with
// their count (refusals.go): refusals cost their callers no database
// write and no wait.
package operator
