package sshserve

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	gossh "golang.org/x/crypto/ssh"

	"github.com/deploysync/deploysync/internal/fileowner"
)

// loadHostKey reads the host key from path (OpenSSH or PEM private key, as
// ssh-keygen writes it) and returns its signer. A missing file is
// generated (ed25519, mode 0600) only when generate is set: in production
// a new host key on every start would teach people to accept any key.
//
// The file is a private key, so it is refused, as token files are, when
// users other than its owner may read it, or another user than this one
// (or root) owns it; but for one exception, how Kubernetes mounts a Secret
// for an unprivileged pod (root's, readable by the pod's fsGroup, this
// process's group). A DSA key or an RSA key under 2048 bits is refused
// too, and an RSA key signs with SHA-2 only.
func loadHostKey(path string, generate bool) (gossh.Signer, error) {
	data, err := readHostKey(path)
	if errors.Is(err, fs.ErrNotExist) && generate {
		data, err = generateHostKey(path)
	} else if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("SSH host key %s does not exist: create it with `ssh-keygen -t ed25519 -N '' -f %s` (or let the dev stack generate one)", path, path)
	}
	if err != nil {
		return nil, err
	}
	signer, err := gossh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("SSH host key %s: not an unencrypted private key: %w", path, err)
	}
	if err := weakKey(signer.PublicKey()); err != nil {
		return nil, fmt.Errorf("SSH host key %s: %w; make an ed25519 one (ssh-keygen -t ed25519)", path, err)
	}
	if signer.PublicKey().Type() == gossh.KeyAlgoRSA {
		as, ok := signer.(gossh.AlgorithmSigner)
		if !ok {
			return nil, fmt.Errorf("SSH host key %s: an RSA key that cannot sign with SHA-2", path)
		}
		if signer, err = gossh.NewSignerWithAlgorithms(as, rsaHostKeyAlgorithms); err != nil {
			return nil, fmt.Errorf("SSH host key %s: %w", path, err)
		}
	}
	return signer, nil
}

// readHostKey reads the host key file, refusing one that is not private
// (see loadHostKey). The file read is the file checked: Stat on the open
// file, not on its name.
func readHostKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("SSH host key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("SSH host key: %w", err)
	}
	if err := private(path, info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("SSH host key: %w", err)
	}
	return data, nil
}

// private refuses a host key file that users other than its owner may
// read, or that another user (not root) owns, with the command that
// fixes it.
func private(path string, info fs.FileInfo) error {
	owner, ok := fileowner.Of(info)
	if !ok {
		return nil // no owner to tell on this system
	}
	euid := uint32(os.Geteuid())
	if owner.UID != euid && owner.UID != 0 {
		return fmt.Errorf("SSH host key %s belongs to uid %d, and ctrld runs as uid %d: run `chown %d %s`", path, owner.UID, euid, euid, path)
	}
	perm := info.Mode().Perm()
	if perm&0o077 == 0 {
		return nil // owner only
	}
	// A Kubernetes Secret (defaultMode 0400) mounted for a pod with an
	// fsGroup: root's, readable by that group, which is this process's.
	if perm&0o007 == 0 && perm&0o070 == 0o040 && owner.UID == 0 && euid != 0 && fileowner.InGroup(owner.GID) {
		return nil
	}
	return fmt.Errorf("SSH host key %s has mode %04o, readable by users other than its owner: run `chmod 600 %s` (a Kubernetes Secret: defaultMode 0400 and the pod's fsGroup)", path, perm, path)
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
