// Package liveview answers ctrld's live views of the region's deployments:
// their Pods, their objects' events and a container's logs, asked on the
// LiveRequests stream the agent keeps open and each answered on a
// LiveAnswer call of its own, on the agent's connection (ctrld never dials
// into a cluster).
//
// The agent decides what it serves, whatever ctrld asks (argocd-agent's
// issue #291: authorization only on the principal lets an agent serve
// anything its RBAC allows). A request is answered only for a namespace
// that is not reserved (naming.Reserved, the agent's own) and is the
// agent's (reconcile.Namespaces: labeled unkey.managed.by=krane), and only
// with the deployment's own objects there: Pods carrying the managed-by
// label and the deployment's ID label, the events of those Pods and of the
// deployment's StatefulSet and Service, and the logs of such a Pod. A
// request for anything else is refused with an error answer before
// anything else is read. The cluster's owner may switch live views off
// (Run is not started, LiveRequests never opened) or serve Pods and events
// only (Serves); what an agent serves goes up with LiveRequests.
//
// Every answer is bounded (Config): at most MaxAnswers at once, of which
// MaxFollows follow a log, and a request beyond that is answered at once
// with an error saying busy; the API server must begin its answer within
// FirstByte, and a whole answer that does not follow ends within
// AnswerTimeout (a follow within FollowTimeout); log text stops at the
// request's limit_bytes or MaxLogBytes, whichever is smaller, with
// truncated; a chunk is at most 64 KiB. Logs are read from the API server
// only as fast as they are sent: a Send blocks while ctrld's side reads
// nothing, and so does the read behind it (nothing is buffered beyond a
// chunk and the transports' windows), until StallTimeout ends the answer.
//
// Everything sent is untrusted text to the people who read it: log text,
// reasons, messages and names go through textclean (terminal controls
// removed, valid UTF-8, capped).
package liveview
