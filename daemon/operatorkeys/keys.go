package operatorkeys

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/operatorkey"
)

// Role is what a key may do.
type Role = operatorkey.Role

// The roles.
const (
	ReadOnly = operatorkey.RoleReadOnly
	Operator = operatorkey.RoleOperator
)

// ParseRole parses a role as the CLI takes it.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if err := operatorkey.RoleValidator(r); err != nil {
		return "", fmt.Errorf("role: want %s or %s, got %q", ReadOnly, Operator, s)
	}
	return r, nil
}

// Key is a registered key.
type Key struct {
	Name string
	Role Role
	// Logs: the key may read pods' logs (a permission of its own).
	Logs        bool
	Fingerprint string // "SHA256:…", as ssh-keygen -l prints it
	// AuthorizedKey is the key as an authorized_keys line without options
	// or comment.
	AuthorizedKey string
	CreatedAt     string
}

// ErrNotFound is returned by Remove when nothing matched.
var ErrNotFound = errors.New("no such key")

// ErrKeyTaken is returned by Add for a key registered already.
var ErrKeyTaken = errors.New("key is registered already")

// fingerprintPrefix starts every fingerprint (ssh.FingerprintSHA256).
const fingerprintPrefix = "SHA256:"

// maxKeyLen is operator_keys.authorized_key's size (ent/schema).
const maxKeyLen = 8192

// minRSABits refuses RSA keys OpenSSH itself no longer makes.
const minRSABits = 2048

// ParseKey parses one public key as ssh-keygen writes it (an
// authorized_keys line, comment allowed). It refuses anything else: no key,
// more than one, options (which the console would not honour), a
// certificate, a DSA key, an RSA key under 2048 bits. (The SSH door
// refuses the last two at login too, whatever the table holds:
// tui/sshserve.)
func ParseKey(data []byte) (ssh.PublicKey, error) {
	if strings.Contains(string(data), "PRIVATE KEY") {
		return nil, errors.New("is a private key: give the public one (the .pub file); nothing was stored")
	}
	var lines []string
	for l := range strings.Lines(string(data)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	switch {
	case len(lines) == 0:
		return nil, errors.New("holds no public key (want one line as in id_ed25519.pub)")
	case len(lines) > 1:
		return nil, fmt.Errorf("holds %d lines; want exactly one public key", len(lines))
	}
	key, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(lines[0]))
	if err != nil {
		return nil, fmt.Errorf("not an SSH public key (want one line as in id_ed25519.pub, not a private key): %w", err)
	}
	if len(rest) > 0 {
		return nil, errors.New("holds more than one key; want exactly one")
	}
	if len(options) > 0 {
		return nil, fmt.Errorf("has authorized_keys options (%s), which the console does not honour; give the bare key", strings.Join(options, ","))
	}
	if _, ok := key.(*ssh.Certificate); ok {
		return nil, errors.New("is a certificate; register the plain public key")
	}
	if key.Type() == ssh.InsecureKeyAlgoDSA {
		return nil, errors.New("is a DSA key, which OpenSSH no longer takes; make an ed25519 one (ssh-keygen -t ed25519)")
	}
	if ck, ok := key.(ssh.CryptoPublicKey); ok {
		if rsa, ok := ck.CryptoPublicKey().(interface{ Size() int }); ok && key.Type() == ssh.KeyAlgoRSA && rsa.Size()*8 < minRSABits {
			return nil, fmt.Errorf("is an RSA key of %d bits; want at least %d (or ed25519)", rsa.Size()*8, minRSABits)
		}
	}
	return key, nil
}

// checkName refuses names the audit log could not show plainly, and names
// Remove would take for a fingerprint.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("name: must not be empty")
	case strings.HasPrefix(name, fingerprintPrefix):
		return fmt.Errorf("name %q: must not start with %q (remove-key would take it for a key's fingerprint)", name, fingerprintPrefix)
	case len(name) > 128:
		return fmt.Errorf("name: %d bytes; at most 128", len(name))
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("name %q: no spaces or control characters", name)
	}
	return nil
}

// Registry is the operator_keys table.
type Registry struct{ client *ent.Client }

// New returns the registry on client.
func New(client *ent.Client) *Registry { return &Registry{client: client} }

// Add registers key for the operator name with role. Nothing is written
// when anything is wrong.
func (r *Registry) Add(ctx context.Context, name string, role Role, logs bool, key ssh.PublicKey) (Key, error) {
	if err := checkName(name); err != nil {
		return Key{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return Key{}, err
	}
	fp := ssh.FingerprintSHA256(key)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	if len(line) > maxKeyLen {
		return Key{}, fmt.Errorf("key: %d bytes as an authorized_keys line; at most %d", len(line), maxKeyLen)
	}
	k, err := r.client.OperatorKey.Create().SetName(name).SetRole(role).SetLogs(logs).SetFingerprint(fp).SetAuthorizedKey(line).Save(ctx)
	if ent.IsConstraintError(err) {
		owner, _ := r.Lookup(ctx, fp)
		return Key{}, fmt.Errorf("%s (for %q): %w; remove it first (ctrld operator remove-key %s)", fp, owner.Name, ErrKeyTaken, fp)
	}
	if err != nil {
		return Key{}, fmt.Errorf("store key: %w", err)
	}
	return toKey(k), nil
}

// List returns every key, by name.
func (r *Registry) List(ctx context.Context) ([]Key, error) {
	ks, err := r.client.OperatorKey.Query().Order(ent.Asc(operatorkey.FieldName), ent.Asc(operatorkey.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(ks))
	for i, k := range ks {
		out[i] = toKey(k)
	}
	return out, nil
}

// Remove removes the key with this fingerprint ("SHA256:…"), or every key
// of the operator of this name, and returns how many it removed; none is
// ErrNotFound.
func (r *Registry) Remove(ctx context.Context, fingerprintOrName string) (int, error) {
	where := operatorkey.Name(fingerprintOrName)
	what := "operator"
	if strings.HasPrefix(fingerprintOrName, fingerprintPrefix) {
		where, what = operatorkey.Fingerprint(fingerprintOrName), "key with fingerprint"
	}
	n, err := r.client.OperatorKey.Delete().Where(where).Exec(ctx)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%s %q: %w (ctrld operator list-keys shows them)", what, fingerprintOrName, ErrNotFound)
	}
	return n, nil
}

// Lookup returns the key with fingerprint; ok is false when none is
// registered (err is then nil).
func (r *Registry) Lookup(ctx context.Context, fingerprint string) (_ Key, err error) {
	k, err := r.client.OperatorKey.Query().Where(operatorkey.Fingerprint(fingerprint)).Only(ctx)
	if err != nil {
		return Key{}, err
	}
	return toKey(k), nil
}

// Find returns the key with fingerprint and whether it is registered; err
// is only for a failed read.
func (r *Registry) Find(ctx context.Context, fingerprint string) (Key, bool, error) {
	k, err := r.Lookup(ctx, fingerprint)
	if ent.IsNotFound(err) {
		return Key{}, false, nil
	}
	return k, err == nil, err
}

// Live returns the registered keys among fingerprints, by fingerprint: one
// query for every live session of a replica.
func (r *Registry) Live(ctx context.Context, fingerprints []string) (map[string]Key, error) {
	out := map[string]Key{}
	if len(fingerprints) == 0 {
		return out, nil
	}
	ks, err := r.client.OperatorKey.Query().Where(operatorkey.FingerprintIn(fingerprints...)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range ks {
		out[k.Fingerprint] = toKey(k)
	}
	return out, nil
}

func toKey(k *ent.OperatorKey) Key {
	return Key{Name: k.Name, Role: k.Role, Logs: k.Logs, Fingerprint: k.Fingerprint, AuthorizedKey: k.AuthorizedKey,
		CreatedAt: k.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")}
}
