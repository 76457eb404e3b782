// Package auth issues and checks ctrld's bearer tokens. An agent token is
// bound to one region and admits only the cluster service, for that region;
// an operator token admits only the operator service and names the operator
// for the audit log. Reading pods' logs (StreamLogs) is a grant of its own,
// since logs may carry secrets: a token has it only when created with it
// (Grants.Logs), a console session only when its key has it. Tokens are 256 random bits shown once; only their
// SHA-256 is stored, so a database leak does not leak credentials. Each
// has an ID (tok_…, TokenID) that names it to people: tokens may share a
// name, and revoking by a shared name is refused (Revoke). Tokens are
// looked up at most LookupsAtOnce at once, and unknown ones are remembered
// for a minute (lookup.go), so no number of calls with bad tokens takes
// more of the main pool than that. A token is checked on every call and,
// for streams, again every recheck interval while they run, so revoking a
// token cuts off its agent's running stream.
//
// One method takes no token: a ctrld replica's Poke (daemon/peers), which
// other replicas call with the secret the target registered in the
// database and which checks that secret itself. Every other method of its
// service is refused (Authenticator.SelfChecked).
package auth
