// Package streamtest has an agent-side client of the watch stream for tests
// and benchmarks: it follows a region, keeps the view an agent would build
// (apply, delete, garbage collection after a full sync), resumes from its
// last bookmark on every reconnect and resyncs when told to.
package streamtest
