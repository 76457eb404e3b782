package sshserve

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	gossh "golang.org/x/crypto/ssh"
)

// loadHostKey reads the host key from path (OpenSSH or PEM private key, as
// ssh-keygen writes it). A missing file is generated (ed25519, mode 0600)
// only when generate is set: in production a new host key on every start
// would teach people to accept any key.
func loadHostKey(path string, generate bool) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && generate {
		return generateHostKey(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("SSH host key %s does not exist: create it with `ssh-keygen -t ed25519 -N '' -f %s` (or let the dev stack generate one)", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("SSH host key: %w", err)
	}
	if _, err := gossh.ParsePrivateKey(data); err != nil {
		return nil, fmt.Errorf("SSH host key %s: not an unencrypted private key: %w", path, err)
	}
	return data, nil
}

func generateHostKey(path string) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "deploysync console host key")
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(block)
	// O_EXCL: never overwrite a key another replica just wrote.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("SSH host key: generate %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("SSH host key: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("SSH host key: write %s: %w", path, err)
	}
	return data, nil
}
