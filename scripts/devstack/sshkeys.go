package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// The console over SSH in the dev stack: ctrld serves it on sshAddr with a
// host key it generates in sshDir(), to two key pairs devstack makes there
// and registers for the operator, one that may act and one read-only.

// sshDir holds the dev stack's SSH keys, its host key and known_hosts.
func sshDir() string { return filepath.Join(stateDir, "ssh") }

func hostKeyFile() string { return filepath.Join(sshDir(), "host_ed25519") }

func knownHostsFile() string { return filepath.Join(sshDir(), "known_hosts") }

// devKey is a key pair the dev stack registers, as ssh-keygen writes it:
// the private key in file (0600), the public one in file.pub.
type devKey struct {
	file string
	role string // ctrld operator add-key --role
}

func devKeys() []devKey {
	return []devKey{{filepath.Join(sshDir(), "operator"), "operator"}, {filepath.Join(sshDir(), "read-only"), "read-only"}}
}

// ensure makes the key pair unless its private key exists already.
func (k devKey) ensure() error {
	if _, err := os.Stat(k.file); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(k.file), 0o700); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "deploysync dev stack, "+k.role)
	if err != nil {
		return err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.file, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	return os.WriteFile(k.file+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o644)
}

// writeKnownHosts writes the host key ctrld generated, once it has, as a
// known_hosts file for sshAddr under the names the instructions use: ssh
// then checks the key (every run of the stack makes a new one, which an
// ssh relying on ~/.ssh/known_hosts would call a man in the middle).
func writeKnownHosts(within time.Duration) error {
	deadline := time.Now().Add(within)
	var pemBytes []byte
	for {
		var err error
		if pemBytes, err = os.ReadFile(hostKeyFile()); err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return fmt.Errorf("ctrld's SSH host key: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	signer, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		return fmt.Errorf("ctrld's SSH host key %s: %w", hostKeyFile(), err)
	}
	_, port, err := net.SplitHostPort(sshAddr)
	if err != nil {
		return err
	}
	hosts := []string{net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port)}
	line := knownhosts.Line(hosts, signer.PublicKey())
	return os.WriteFile(knownHostsFile(), []byte(line+"\n"), 0o644)
}

// sshCommand is how to open the console with key, from the repository's
// root.
func sshCommand(key devKey) string {
	_, port, _ := net.SplitHostPort(sshAddr)
	return fmt.Sprintf("ssh -p %s -i %s -o UserKnownHostsFile=%s localhost", port, key.file, knownHostsFile())
}
