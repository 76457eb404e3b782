package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/internal/testdb"
)

// run runs ctrld with args and returns its output and error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	a := app()
	var out bytes.Buffer
	a.Writer, a.ErrWriter = &out, &out
	err := runCtrld(context.Background(), a, append([]string{"ctrld"}, args...)) // as main runs it
	return out.String(), err
}

// keyFile writes key as ssh-keygen writes a .pub file and returns its path.
func keyFile(t *testing.T, key ssh.PublicKey, comment string) string {
	t.Helper()
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))) + " " + comment + "\n"
	return writeFile(t, line)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestOperatorKeys(t *testing.T) {
	dsn := testdb.New(t).DSN
	if _, err := run(t, "migrate", "--database-dsn", dsn); err != nil {
		t.Fatal(err)
	}
	alice, bob := newKey(t), newKey(t)
	out, err := run(t, "operator", "add-key", "--database-dsn", dsn, "--role", "operator", "--logs", "alice", keyFile(t, alice, "alice@laptop"))
	if err != nil || !strings.Contains(out, ssh.FingerprintSHA256(alice)) || !strings.Contains(out, "(operator, may read logs)") {
		t.Fatalf("add-key alice: %q, %v", out, err)
	}
	if _, err := run(t, "operator", "add-key", "--database-dsn", dsn, "--role", "read-only", "bob", keyFile(t, bob, "")); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "operator", "list-keys", "--database-dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"alice  operator   yes   " + ssh.FingerprintSHA256(alice), "bob    read-only  no    " + ssh.FingerprintSHA256(bob)} {
		if !strings.Contains(out, want) {
			t.Errorf("list-keys lacks %q:\n%s", want, out)
		}
	}
	if out, err := run(t, "operator", "remove-key", "--database-dsn", dsn, ssh.FingerprintSHA256(bob)); err != nil || out != "removed 1 key(s)\n" {
		t.Fatalf("remove-key by fingerprint: %q, %v", out, err)
	}
	if out, err := run(t, "operator", "remove-key", "--database-dsn", dsn, "alice"); err != nil || out != "removed 1 key(s)\n" {
		t.Fatalf("remove-key by name: %q, %v", out, err)
	}
	if out, _ := run(t, "operator", "list-keys", "--database-dsn", dsn); out != "NAME  ROLE  LOGS  FINGERPRINT  ADDED\n" {
		t.Errorf("keys left after removing both:\n%s", out)
	}
}

func TestOperatorAddKeyRefusesBadInput(t *testing.T) {
	dsn := testdb.New(t).DSN
	if _, err := run(t, "migrate", "--database-dsn", dsn); err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	if _, err := run(t, "operator", "add-key", "--database-dsn", dsn, "--role", "operator", "carol", keyFile(t, key, "")); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	privPEM, _ := ssh.MarshalPrivateKey(priv, "")
	smallRSA, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallRSAKey, _ := ssh.NewPublicKey(&smallRSA.PublicKey)
	good := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(newKey(t))))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"bad role", []string{"--role", "admin", "dave", keyFile(t, newKey(t), "")}, "role: want read-only or operator"},
		{"no role", []string{"dave", keyFile(t, newKey(t), "")}, `"role" not set`},
		{"empty file", []string{"--role", "operator", "dave", writeFile(t, "")}, "holds no public key"},
		{"private key", []string{"--role", "operator", "dave", writeFile(t, string(pem.EncodeToMemory(privPEM)))}, "is a private key"},
		{"garbage", []string{"--role", "operator", "dave", writeFile(t, "ssh-ed25519 AAAAnotbase64!!\n")}, "not an SSH public key"},
		{"two keys", []string{"--role", "operator", "dave", writeFile(t, good+"\n"+good+"\n")}, "holds 2 lines"},
		{"options", []string{"--role", "operator", "dave", writeFile(t, `command="/bin/sh" `+good+"\n")}, "options"},
		{"small RSA", []string{"--role", "operator", "dave", keyFile(t, smallRSAKey, "")}, "RSA key of 1024 bits"},
		{"missing file", []string{"--role", "operator", "dave", "/nonexistent/key.pub"}, "no such file"},
		{"name with space", []string{"--role", "operator", "dave smith", keyFile(t, newKey(t), "")}, "no spaces"},
		// remove-key would take such a name for a fingerprint.
		{"name like a fingerprint", []string{"--role", "operator", "SHA256:dave", keyFile(t, newKey(t), "")}, `must not start with "SHA256:"`},
		{"no file", []string{"--role", "operator", "dave"}, "want NAME and a public key FILE"},
		{"key taken", []string{"--role", "read-only", "dave", keyFile(t, key, "")}, "registered already"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, append([]string{"operator", "add-key", "--database-dsn", dsn}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	out, err := run(t, "operator", "list-keys", "--database-dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, "\n"); got != 2 || !strings.Contains(out, "carol") {
		t.Errorf("refused add-keys wrote keys:\n%s", out)
	}
	for _, arg := range []string{"SHA256:nope", "nobody"} {
		if _, err := run(t, "operator", "remove-key", "--database-dsn", dsn, arg); err == nil || !strings.Contains(err.Error(), "no such key") {
			t.Errorf("remove-key %s: %v, want no such key", arg, err)
		}
	}
}
