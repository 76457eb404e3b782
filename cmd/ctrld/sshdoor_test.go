package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/daemon/operatorkeys"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/internal/testdb"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// The SSH door against a real ctrld on MariaDB (issue 29, item 8); the
// door's own bounds are tested with x/crypto's client in tui/sshserve.

// The documented command lines, exactly as README.md and docs/design.md
// write them (flags after the arguments, the database from the
// environment), do what they say: urfave/cli alone stops reading flags at
// the first argument.
func TestCtrldCommandsAsTheDocsWriteThem(t *testing.T) {
	dsn := testdb.New(t).DSN
	t.Setenv("CTRLD_DATABASE_DSN", dsn)
	if out, err := run(t, "migrate"); err != nil {
		t.Fatalf("ctrld migrate: %v\n%s", err, out)
	}
	alice, bob := keyFile(t, newKey(t), "alice@laptop"), keyFile(t, newKey(t), "")
	for _, line := range []string{
		"operator add-key alice --role operator " + alice, // README.md
		"operator add-key bob --role read-only " + bob,    // docs/design.md: NAME --role read-only|operator FILE
	} {
		if out, err := run(t, strings.Fields(line)...); err != nil || !strings.Contains(out, "registered SHA256:") {
			t.Errorf("ctrld %s: %v\n%s", line, err, out)
		}
	}
	out, err := run(t, "operator", "list-keys")
	if err != nil || !strings.Contains(out, "alice  operator") || !strings.Contains(out, "bob    read-only") {
		t.Fatalf("list-keys: %v\n%s", err, out)
	}
	// The same for every command: a flag after an argument, and one
	// after "--" that is an argument.
	if out, err := run(t, "token", "create", "--operator", "carol"); err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	if out, err := run(t, "token", "revoke", "carol", "--operator"); err != nil || !strings.Contains(out, "revoked") {
		t.Errorf("ctrld token revoke carol --operator: %v\n%s", err, out)
	}
	if _, err := run(t, "operator", "remove-key", "--", "--role"); err == nil || !strings.Contains(err.Error(), `"--role": no such key`) {
		t.Errorf(`ctrld operator remove-key -- --role: %v; want "--role" taken for a name`, err)
	}
	if out, err := run(t, "operator", "remove-key", "bob", "--database-dsn", dsn); err != nil || out != "removed 1 key(s)\n" {
		t.Errorf("ctrld operator remove-key bob --database-dsn …: %v\n%s", err, out)
	}
}

// An RSA key under 2048 bits put in the table by hand (add-key refuses
// it) does not log in: the door refuses weak keys itself.
func TestSSHWeakKeyInTheTableDoesNotLogIn(t *testing.T) {
	e := startSSH(t, sshserve.Config{})
	priv, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operatorkeys.ParseKey(gossh.MarshalAuthorizedKey(signer.PublicKey())); err == nil {
		t.Fatal("add-key takes an RSA-1024 key")
	}
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	e.DB.Ent.OperatorKey.Create().SetName("old").SetRole(operatorkeys.Operator).SetFingerprint(gossh.FingerprintSHA256(signer.PublicKey())).
		SetAuthorizedKey(line).SaveX(context.Background())
	if c, err := e.dial(gossh.PublicKeys(signer)); err == nil {
		c.Close()
		t.Fatal("an RSA-1024 key in the table logged in")
	}
	strong := e.person(t, "alice", operatorkeys.Operator)
	if c, err := e.dial(gossh.PublicKeys(strong)); err != nil {
		t.Fatalf("an ed25519 key: %v", err)
	} else {
		c.Close()
	}
}

// A read-only key refused from two addresses within one window of the
// refusal audit: the audit shows both (a stolen key does not hide in its
// owner's record), one row per address.
func TestSSHRefusalsFromTwoAddressesShowBoth(t *testing.T) {
	// One window for the whole test: the refusals are written when ctrld
	// stops.
	e := startSSHWith(t, servertest.Start(t, server.Config{RefusalAuditWindow: time.Hour}), sshserve.Config{}, nil)
	e.AgentToken("eu-west")
	bob := e.person(t, "bob", operatorkeys.ReadOnly)
	deploy := "deploy api --image ghcr.io/acme/api:v1 --region eu-west --workspace ws --environment prod"
	for _, src := range []*net.TCPAddr{{IP: net.IPv4(127, 0, 0, 1)}, from(0), {IP: net.IPv4(127, 0, 0, 1)}} {
		c, err := e.sshFrom(src, gossh.PublicKeys(bob))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, status := command(t, c, deploy); status != 1 {
			t.Fatalf("a read-only key's deploy from %v: status %d", src, status)
		}
		c.Close()
	}
	e.console.Stop()
	e.Server.Stop()
	var rows []string
	for _, l := range e.DB.Ent.AuditLog.Query().AllX(context.Background()) {
		rows = append(rows, fmt.Sprintf("%s ×%d", l.Actor, l.Count))
	}
	all := strings.Join(rows, "\n")
	if len(rows) != 2 || !strings.Contains(all, "from 127.0.0.1:") || !strings.Contains(all, "from "+from(0).IP.String()+":") {
		t.Fatalf("three refused deploys of bob's key, from 127.0.0.1 twice and %v once; the audit has:\n%s", from(0).IP, all)
	}
}

// Debian's OpenSSH client: the defaults log in, and a client held to
// SHA-1 key exchange, SHA-1 MACs or ssh-rsa (SHA-1) signatures does not.
func TestSSHOpenSSHClientWithoutSHA1(t *testing.T) {
	needTools(t, "ssh")
	e := startSSH(t, sshserve.Config{AuthBurst: 100})
	e.AgentToken("eu-west")
	dir := t.TempDir()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "id_rsa")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := gossh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.keys.Add(context.Background(), "alice", operatorkeys.Operator, true, pub); err != nil {
		t.Fatal(err)
	}
	// The client can speak what the server must refuse.
	for q, want := range map[string]string{"kex": "diffie-hellman-group14-sha1", "mac": "hmac-sha1"} {
		out, err := exec.Command("ssh", "-Q", q).Output()
		if err != nil || !strings.Contains(string(out), want+"\n") {
			t.Fatalf("ssh -Q %s: %v; this client lacks %s", q, err, want)
		}
	}
	_, port, _ := strings.Cut(e.console.Addr(), ":")
	ssh := func(opts ...string) (string, error) {
		args := []string{"-F", "/dev/null", "-p", port, "-i", keyFile, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10"}
		args = append(append(args, opts...), "127.0.0.1", "regions")
		out, err := exec.Command("ssh", args...).CombinedOutput()
		return string(out), err
	}
	if out, err := ssh(); err != nil || !strings.Contains(out, "eu-west") {
		t.Fatalf("OpenSSH's defaults with an RSA-2048 key: %v\n%s", err, out)
	}
	for _, c := range []struct {
		opts []string
		want string
	}{
		{[]string{"-o", "KexAlgorithms=diffie-hellman-group14-sha1"}, "no matching key exchange method"},
		{[]string{"-o", "Ciphers=aes128-ctr", "-o", "MACs=hmac-sha1"}, "no matching MAC"},
		{[]string{"-o", "Ciphers=aes128-ctr", "-o", "MACs=hmac-sha1-96"}, ""}, // not every client offers it
		{[]string{"-o", "PubkeyAcceptedAlgorithms=ssh-rsa"}, "Permission denied"},
	} {
		out, err := ssh(c.opts...)
		if err == nil {
			t.Errorf("ssh %s: logged in\n%s", strings.Join(c.opts, " "), out)
		} else if c.want != "" && !strings.Contains(out, c.want) {
			t.Errorf("ssh %s: %v, want %q in %q", strings.Join(c.opts, " "), err, c.want, out)
		}
	}
}
