package dial

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/deploysync/deploysync/internal/fileowner"
)

// Token reads the token from file when given, else returns flag.
//
// A token file that another user owns, or that users other than its owner
// may read, is refused with the command that fixes it: a token is a
// credential, and one readable by a group or by everyone on the machine
// is a token given away, as is one in another user's hands, who may read
// it or swap it for theirs at will. Root may own it: root reads every file
// anyway.
//
// With AllowSecretVolume, and only then, one more file passes: how a
// platform hands a root-owned secret to an unprivileged service.
func Token(flag, file string, opts ...TokenOption) (string, error) {
	if file == "" {
		return flag, nil
	}
	var rules tokenRules
	for _, o := range opts {
		o(&rules)
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	// The file read is the file checked: Stat on the open file, not on
	// its name, which could be swapped in between.
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if err := private(file, info, rules); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// TokenOption widens what Token accepts.
type TokenOption func(*tokenRules)

// tokenRules is what the options chose.
type tokenRules struct{ secretVolume bool }

// AllowSecretVolume accepts a file owned by root that only root and one
// group of this process may read (mode 0440 or 0640), as the kubelet
// mounts a Secret for a pod with an fsGroup: root chose that group, and
// this process is in it. It is for a service in a pod (agentd); a person's
// own token file (unkey-tui) has no reason to be readable by a group.
func AllowSecretVolume() TokenOption {
	return func(r *tokenRules) { r.secretVolume = true }
}

// private refuses a token file that another user owns, or that users other
// than its owner may read, but for the exception AllowSecretVolume names.
func private(name string, info fs.FileInfo, rules tokenRules) error {
	perm := info.Mode().Perm()
	owner, ok := fileowner.Of(info)
	if !ok {
		return nil // no owner to tell on this system
	}
	if euid := uint32(os.Geteuid()); owner.UID != euid && owner.UID != 0 {
		return fmt.Errorf("%w: %s belongs to uid %d, and this process runs as uid %d; run `chown %d %s` or recreate it as uid %d with mode 0600",
			ErrTokenFileNotOwned, name, owner.UID, euid, euid, name, euid)
	}
	if perm&0o077 == 0 {
		return nil // owner only
	}
	if rules.secretVolume && perm&0o007 == 0 && perm&0o070 == 0o040 && owner.UID == 0 && fileowner.InGroup(owner.GID) {
		return nil
	}
	return fmt.Errorf("%w: %s has mode %04o; run `chmod 600 %s`%s", ErrTokenFileReadable, name, perm, name, kubernetesHint(owner, rules))
}

// kubernetesHint says how to mount a Secret so that its token passes, for
// a root-owned file where Secret volumes are allowed: most likely one
// without defaultMode.
func kubernetesHint(owner fileowner.Owner, rules tokenRules) string {
	if owner.UID != 0 || !rules.secretVolume {
		return ""
	}
	return " (for a Kubernetes Secret volume: defaultMode 0440 and the pod's securityContext.fsGroup)"
}
