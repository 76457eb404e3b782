package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/apitoken"
)

// IDPrefix begins every token ID.
const IDPrefix = "tok_"

// Errors of Revoke.
var (
	// ErrNoSuchToken: no live token has the ID or name given.
	ErrNoSuchToken = errors.New("no such live token")
	// ErrAmbiguous: several live tokens share the name given; nothing was
	// revoked.
	ErrAmbiguous = errors.New("names more than one live token")
)

// TokenID is the ID of token: IDPrefix and the first 12 hex digits of the
// SHA-256 of its stored hash. It names the token to people (`ctrld token
// list`, `ctrld token revoke`) and is no secret: a one-way function of 256
// random bits, 48 bits of which say nothing usable about the token. Derived
// rather than drawn at random, it is the same for tokens issued before IDs
// existed (store.Migrate computes it in SQL from the hash), and whoever
// holds a token can tell its ID.
func TokenID(token string) string {
	sum := sha256.Sum256([]byte(hash(token)))
	return IDPrefix + hex.EncodeToString(sum[:])[:12]
}

// Token describes an issued token, never the token itself.
type Token struct {
	ID     string
	Kind   apitoken.Kind
	Name   string
	Region string // agents only
	// Logs: an operator token granted reading pods' logs (Grants).
	Logs      bool
	CreatedAt time.Time
	RevokedAt *time.Time
}

func (t Token) String() string {
	s := fmt.Sprintf("%s (%s token %q", t.ID, t.Kind, t.Name)
	if t.Region != "" {
		s += ", region " + t.Region
	}
	if t.Logs {
		s += ", may read logs"
	}
	return s + ", created " + t.CreatedAt.UTC().Format(time.RFC3339) + ")"
}

func tokenOf(t *ent.APIToken) Token {
	return Token{ID: t.PublicID, Kind: t.Kind, Name: t.Name, Region: t.Region, Logs: t.Logs, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
}

// List returns the live tokens, and the revoked ones too if withRevoked,
// oldest first.
func List(ctx context.Context, client *ent.Client, withRevoked bool) ([]Token, error) {
	q := client.APIToken.Query().Order(apitoken.ByCreatedAt(), apitoken.ByID())
	if !withRevoked {
		q.Where(apitoken.RevokedAtIsNil())
	}
	rows, err := q.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens := make([]Token, len(rows))
	for i, r := range rows {
		tokens[i] = tokenOf(r)
	}
	return tokens, nil
}

// Revoke revokes one live token and returns it. ref is the token's ID
// (TokenID), of whatever kind, or the name of exactly one live token of
// kind. A name that several live tokens share is refused (ErrAmbiguous,
// naming their IDs) and nothing is revoked: agent tokens share their
// default name, and after a rotation revoking "agent-eu" would cut off the
// new token along with the old one. A revoked operator token's name is
// free again.
//
// The token is revoked by its row, so a token of the same name created
// while this runs is never revoked with it.
func Revoke(ctx context.Context, client *ent.Client, kind apitoken.Kind, ref string) (Token, error) {
	var live []*ent.APIToken
	var err error
	if strings.HasPrefix(ref, IDPrefix) {
		live, err = client.APIToken.Query().Where(apitoken.PublicID(ref), apitoken.RevokedAtIsNil()).All(ctx)
	}
	if err == nil && len(live) == 0 {
		live, err = client.APIToken.Query().
			Where(apitoken.KindEQ(kind), apitoken.Name(ref), apitoken.RevokedAtIsNil()).
			Order(apitoken.ByCreatedAt(), apitoken.ByID()).All(ctx)
	}
	if err != nil {
		return Token{}, fmt.Errorf("find the token: %w", err)
	}
	switch len(live) {
	case 0:
		return Token{}, fmt.Errorf("%q: %w (no live token has this ID, and no live %s token this name; `ctrld token list` shows them)", ref, ErrNoSuchToken, kind)
	case 1:
	default:
		ids := make([]string, len(live))
		for i, t := range live {
			ids[i] = tokenOf(t).String()
		}
		return Token{}, fmt.Errorf("%q %w: %s; nothing was revoked: revoke one by its ID", ref, ErrAmbiguous, strings.Join(ids, ", "))
	}
	t := live[0]
	err = store.WithTx(ctx, client, func(tx *ent.Tx) error {
		n, err := tx.APIToken.Update().Where(apitoken.ID(t.ID), apitoken.RevokedAtIsNil()).
			SetRevokedAt(time.Now().UTC()).ClearLiveOperatorName().Save(ctx)
		if err != nil {
			return fmt.Errorf("revoke %s: %w", t.PublicID, err)
		}
		if n == 0 { // revoked meanwhile, by someone else
			return fmt.Errorf("%q: %w (revoked meanwhile)", ref, ErrNoSuchToken)
		}
		if t.Kind != Operator {
			return nil
		}
		// Older versions let live operator tokens share a name, and
		// store.Migrate gave it to one of them: while another is live,
		// the name stays taken, by that one now.
		_, err = tx.ExecContext(ctx, "UPDATE api_tokens SET live_operator_name = name "+
			"WHERE kind = 'operator' AND name = ? AND revoked_at IS NULL AND live_operator_name IS NULL LIMIT 1", t.Name)
		if err != nil {
			return fmt.Errorf("revoke %s: pass its name on: %w", t.PublicID, err)
		}
		return nil
	})
	if err != nil {
		return Token{}, err
	}
	return tokenOf(t), nil
}
