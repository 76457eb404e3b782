package auth

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/deploysync/deploysync/ent/apitoken"
)

// errRevoked is the cause a stream's context ends with when its token is
// revoked.
var errRevoked = errors.New("token revoked")

// liveStreams are the running streams, by the hash of their token.
type liveStreams struct {
	mu     sync.Mutex
	byHash map[string]map[*streamEnd]struct{}
}

// streamEnd ends one stream.
type streamEnd struct{ cancel context.CancelCauseFunc }

func (l *liveStreams) add(ctx context.Context, hash string) (context.Context, *streamEnd) {
	ctx, cancel := context.WithCancelCause(ctx)
	end := &streamEnd{cancel: cancel}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byHash[hash] == nil {
		l.byHash[hash] = map[*streamEnd]struct{}{}
	}
	l.byHash[hash][end] = struct{}{}
	return ctx, end
}

func (l *liveStreams) remove(hash string, end *streamEnd) {
	end.cancel(nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byHash[hash], end)
	if len(l.byHash[hash]) == 0 {
		delete(l.byHash, hash)
	}
}

func (l *liveStreams) hashes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.byHash))
}

// end ends every stream of a token.
func (l *liveStreams) end(hash string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for e := range l.byHash[hash] {
		e.cancel(errRevoked)
	}
	return len(l.byHash[hash])
}

// Run checks the tokens of the running streams every interval until ctx
// ends, and ends the streams of tokens revoked since they connected: an
// agent cut off with `ctrld token revoke` stops receiving changes within
// one interval, not at its next reconnect. One query per interval, however
// many streams run. A console session's streams are not looked up: they
// end when its credential is revoked (at the next interval) or its
// connection closes.
func (a *Authenticator) Run(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A console session's streams live while its credential does
		// (its key's removal revokes it, and its connection ends with the
		// session): they are no token's, and the table knows none of them.
		hashes := slices.DeleteFunc(a.streams.hashes(), a.Sessions.live)
		if len(hashes) == 0 {
			continue
		}
		live, err := a.client.APIToken.Query().
			Where(apitoken.HashIn(hashes...), apitoken.RevokedAtIsNil()).
			Select(apitoken.FieldHash).Strings(ctx)
		if err != nil {
			// The streams need the database too; they fail on their own.
			continue
		}
		for _, h := range hashes {
			if !slices.Contains(live, h) {
				log.Info("auth: token revoked; ending its streams", "streams", a.streams.end(h))
			}
		}
	}
}
