package liveview

import "errors"

// Why a request gets an error answer. Each answer's error text starts with
// what these say, then the request's particulars.
var (
	// ErrBusy: the agent answers MaxAnswers (or follows MaxFollows) at
	// once already; the request is answered at once with this, not queued.
	ErrBusy = errors.New("busy")
	// ErrNotServed: the cluster's owner does not let the agent serve this
	// kind of view (agentd --live-views).
	ErrNotServed = errors.New("not served by this agent")
	// ErrRefused: the request names something the agent does not manage
	// for the deployment (a reserved or foreign namespace, a Pod not the
	// deployment's); nothing else was read.
	ErrRefused = errors.New("refused")
	// ErrBadRequest: the request is malformed (an unknown kind, no
	// namespace or deployment).
	ErrBadRequest = errors.New("bad request")
	// ErrNoFirstByte: the API server began no answer within FirstByte.
	ErrNoFirstByte = errors.New("the API server sent nothing in time")
	// ErrTooLong: the answer took longer than AnswerTimeout (or a follow
	// FollowTimeout).
	ErrTooLong = errors.New("the answer took too long")
	// ErrStalled: ctrld's side read nothing of the answer for StallTimeout.
	ErrStalled = errors.New("ctrld read nothing of the answer for too long")
)
