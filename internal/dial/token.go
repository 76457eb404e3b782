package dial

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Token reads the token from file when given, else returns flag.
//
// A token file that users other than its owner may read is refused, with
// the command that fixes it: a token is a credential, and one readable by
// a group or by everyone on the machine is a token given away. The one
// exception is how a platform hands a root-owned secret to an unprivileged
// service: a file owned by root that only root and one group of this
// process may read (mode 0440 or 0640), as the kubelet mounts a Secret
// for a pod with an fsGroup. Root chose that group, and this process is in
// it.
func Token(flag, file string) (string, error) {
	if file == "" {
		return flag, nil
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
	if err := private(file, info); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// private refuses a token file that users other than its owner may read,
// but for the root-owned exception Token describes.
func private(name string, info fs.FileInfo) error {
	perm := info.Mode().Perm()
	owner, ok := ownership(info)
	if !ok || perm&0o077 == 0 {
		return nil // no owner to tell on this system, or owner only
	}
	if perm&0o007 == 0 && perm&0o070 == 0o040 && owner.uid == 0 && inGroup(owner.gid) {
		return nil
	}
	return fmt.Errorf("%w: %s has mode %04o; run `chmod 600 %s`%s", ErrTokenFileReadable, name, perm, name, kubernetesHint(owner))
}

// kubernetesHint says how to mount a Secret so that its token passes, for
// a root-owned file: most likely a Secret volume without defaultMode.
func kubernetesHint(owner fileOwner) string {
	if owner.uid != 0 {
		return ""
	}
	return " (for a Kubernetes Secret volume: defaultMode 0440 and the pod's securityContext.fsGroup)"
}

// inGroup reports whether this process is in group gid.
func inGroup(gid uint32) bool {
	if uint32(os.Getegid()) == gid {
		return true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if uint32(g) == gid {
			return true
		}
	}
	return false
}
