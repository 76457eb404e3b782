// Package bearer owns how a token travels on a gRPC call to ctrld: the
// "authorization: Bearer <token>" header a client attaches (Credentials)
// and the token ctrld reads back from it (FromMetadata).
//
// It is the one piece of ctrld's authentication its clients need, kept
// apart from daemon/auth so that agentd and unkey-tui do not link ctrld's
// token store (Ent, the MySQL driver, the change log). It imports only
// gRPC; scripts/check-rooms.sh keeps the binaries apart.
package bearer
