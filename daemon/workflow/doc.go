// Package workflow drives each deployment's deploy workflow status from
// what agents report: pending (created) → deploying (an instance exists in
// a region where it should run) → ready (in every region where it should run, as many
// instances are running and ready as it has replicas) or failed (not ready
// within Timeout of its creation). The status is derived from the database
// alone, so any ctrld replica may evaluate it, and a restart loses nothing.
package workflow
