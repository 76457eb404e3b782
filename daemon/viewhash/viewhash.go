package viewhash

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/deploysync/deploysync/ent"
)

// SecretID names the installation secret that keys the hashes viewers see.
const SecretID = "view_hash"

// secretLen is the secret's length: SHA-256's block-sized keys need no
// more than its output, 32 bytes.
const secretLen = 32

// Key keys hashes for viewers. The zero Key is not usable.
type Key struct{ secret []byte }

// Of is what a viewer is shown for hash: its HMAC-SHA256 under the
// installation's secret, sixteen hex digits (a valid label value, like
// the hashes it stands for). The empty hash (none) stays empty.
func (k Key) Of(hash string) string {
	if hash == "" {
		return ""
	}
	mac := hmac.New(sha256.New, k.secret)
	mac.Write([]byte(hash))
	return hex.EncodeToString(mac.Sum(nil)[:8])
}

// Ensure makes the installation's secret if the database has none yet.
// Replicas that race each make one and insert it if absent: one wins and
// all read the winner's (Load).
func Ensure(ctx context.Context, client *ent.Client) error {
	secret := make([]byte, secretLen)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("make the view-hash secret: %w", err)
	}
	err := client.InstallationSecret.Create().SetID(SecretID).SetValue(secret).OnConflict().Ignore().Exec(ctx)
	if err != nil {
		return fmt.Errorf("store the view-hash secret: %w", err)
	}
	return nil
}

// Load reads the installation's secret, making it first if the database
// has none (Ensure).
func Load(ctx context.Context, client *ent.Client) (Key, error) {
	if err := Ensure(ctx, client); err != nil {
		return Key{}, err
	}
	s, err := client.InstallationSecret.Get(ctx, SecretID)
	if err != nil {
		return Key{}, fmt.Errorf("read the view-hash secret: %w", err)
	}
	if len(s.Value) < secretLen {
		return Key{}, fmt.Errorf("the view-hash secret is %d bytes, want %d", len(s.Value), secretLen)
	}
	return Key{secret: s.Value}, nil
}

// Source is a process's Key, read once from the database on first use
// and kept: the secret never changes. A failed read is tried again at the
// next use.
type Source struct {
	client *ent.Client
	mu     sync.Mutex
	key    *Key
}

// NewSource returns the Key source of the database client reaches.
func NewSource(client *ent.Client) *Source { return &Source{client: client} }

// Key returns the installation's Key.
func (s *Source) Key(ctx context.Context) (Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return *s.key, nil
	}
	k, err := Load(ctx, s.client)
	if err != nil {
		return Key{}, err
	}
	s.key = &k
	return k, nil
}
