// Package status reports what the cluster actually runs back to ctrld:
// the Pods of each deployment (name, address, phase, readiness, the spec
// hash each carries, why it is not ready and its restarts) and each
// sentinel's available replicas and health, from the informer cache; and
// how far the agent got applying each resource (SyncReporter), from the
// dispatcher. Both are batched and deduplicated — a burst of events for
// one resource becomes one report — and retried until ctrld takes them,
// except a batch ctrld refuses as invalid, which is logged and dropped (a
// retry would be refused again, ahead of every later report).
package status
