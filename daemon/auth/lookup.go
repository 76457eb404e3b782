package auth

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/apitoken"
)

// LookupsAtOnce bounds the token lookups in flight, each a point read that
// holds a connection of the main pool: 8 of its 45, whatever callers send
// (the agents' calls may take 32, see daemon/server; operators, retention
// and the workflow keep the rest). A call waits for a place for as long as
// its deadline allows; a lookup takes well under a millisecond, so eight
// answer thousands of calls a second.
const LookupsAtOnce = 8

// lookupTimeout bounds one lookup, so a database that hangs frees the
// places after it rather than never.
const lookupTimeout = 5 * time.Second

// A token found unknown or revoked is remembered as such for unknownFor,
// up to unknownKept of them (the least recently sent go first): a client
// that retries with a revoked or made-up token costs one lookup a minute,
// not one a call. This never delays a new token: nobody can send a token
// before Create has stored it, its 256 bits being drawn there, so its hash
// cannot be remembered as unknown. A revoked token is never live again.
const (
	unknownFor  = time.Minute
	unknownKept = 4096
)

// errUnknownToken is the refusal of a token that is not, or no longer,
// live.
var errUnknownToken = status.Error(codes.Unauthenticated, "unknown or revoked token")

// tokenLookups looks tokens up in the database, a bounded number at once,
// and remembers the unknown ones for a while.
type tokenLookups struct {
	client  *ent.Client
	places  chan struct{}
	unknown *expirable.LRU[string, struct{}] // hashes of tokens found unknown, for unknownFor
}

func newTokenLookups(client *ent.Client) *tokenLookups {
	return &tokenLookups{client: client, places: make(chan struct{}, LookupsAtOnce),
		unknown: expirable.NewLRU[string, struct{}](unknownKept, nil, unknownFor)}
}

// live returns the live token token is, or a gRPC status: errUnknownToken,
// the caller's deadline or cancellation, or Unavailable.
func (l *tokenLookups) live(ctx context.Context, token string) (*ent.APIToken, error) {
	if !wellFormed(token) {
		return nil, errUnknownToken // ctrld never issued it: nothing to look up
	}
	h := hash(token)
	if l.unknown.Contains(h) {
		return nil, errUnknownToken
	}
	select {
	case l.places <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-l.places }()
	lookupCtx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	t, err := l.client.APIToken.Query().Where(apitoken.Hash(h), apitoken.RevokedAtIsNil()).Only(lookupCtx)
	switch {
	case err == nil:
		return t, nil
	case ent.IsNotFound(err):
		l.unknown.Add(h, struct{}{})
		return nil, errUnknownToken
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Error(codes.Unavailable, "checking the token failed: the database did not answer in time")
	}
	return nil, status.Error(codes.Unavailable, "checking the token failed: database unavailable")
}

// tokenLen is the length of every token Create issues: a prefix of 4 and
// 32 bytes in unpadded base32.
const tokenLen = 4 + 52

// wellFormed reports whether token has the shape of those Create issues
// (and always has): a kind's prefix, then 52 of base32's lower-case
// letters and digits.
func wellFormed(token string) bool {
	if len(token) != tokenLen || !strings.HasPrefix(token, agentPrefix) && !strings.HasPrefix(token, operatorPrefix) {
		return false
	}
	for _, c := range token[len(agentPrefix):] {
		if !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
