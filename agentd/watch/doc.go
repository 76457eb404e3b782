// Package watch keeps one WatchDeploymentChanges stream open for the
// agent's region and feeds it to the dispatcher.
//
// It starts with cursor 0 (a full sync) and afterwards resumes from the
// last bookmark received: events before that bookmark sit in the
// dispatcher until applied, so nothing is lost by resuming past work that
// is still queued. After a full sync's full_sync_done bookmark it garbage
// collects managed objects of resources the sync did not list (what a
// listed resource left in another namespace or under another name its
// apply in the sync removes: identity is whole). It does a full resync
// every ResyncInterval as a safety net, at once when the server sends
// resync_required, and reconnects after any stream end with jittered
// exponential backoff. A paused region simply sends nothing.
//
// A full sync counts as completed only once its garbage collection covered
// every kind. Deletes that happened while the agent was away reach it only
// through that collection, so when listing some kind fails (a timeout, a
// missing permission) the kinds that listed are collected, the failure is
// the watcher's error (the heartbeat shows it on the console), and the
// full sync is redone after a backoff, with or without periodic resyncs,
// until a collection is complete.
package watch
