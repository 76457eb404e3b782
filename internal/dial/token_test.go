package dial_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/dial"
)

// A token file only its owner may read is read; one a group or everyone
// may read, or one another user owns, is refused, with the command that
// fixes it. With AllowSecretVolume (agentd's) root may let one group of
// the reader read it (a Kubernetes Secret mounted with an fsGroup), no
// other; without it (unkey-tui's) not even root may.
func TestTokenFileMustBePrivate(t *testing.T) {
	root := os.Geteuid() == 0
	const nobody = 65534
	for _, c := range []struct {
		name string
		mode os.FileMode
		// chown, as root only: the file's owner and group (-1: as created,
		// root's).
		uid, gid int
		// secretVolume reads with dial.AllowSecretVolume, as agentd does.
		secretVolume bool
		refused      error // nil: the token is read
		rootOnly     bool
	}{
		{name: "owner read-write", mode: 0o600, uid: -1, gid: -1},
		{name: "owner read-only", mode: 0o400, uid: -1, gid: -1},
		{name: "world-readable", mode: 0o644, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable},
		{name: "world-readable only", mode: 0o604, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable},
		{name: "world-writable", mode: 0o602, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable},
		{name: "group-writable", mode: 0o620, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable},
		{name: "another user's, owner read-write", mode: 0o600, uid: nobody, gid: -1, refused: dial.ErrTokenFileNotOwned, rootOnly: true},
		{name: "another user's, owner read-only", mode: 0o400, uid: nobody, gid: nobody, refused: dial.ErrTokenFileNotOwned, rootOnly: true},
		{name: "another user's, as a Secret volume", mode: 0o400, uid: nobody, gid: -1, secretVolume: true, refused: dial.ErrTokenFileNotOwned, rootOnly: true},
		{name: "group-readable, another user's", mode: 0o640, uid: nobody, gid: -1, secretVolume: true, refused: dial.ErrTokenFileNotOwned, rootOnly: true},
		{name: "group-readable, root's, a group of the reader", mode: 0o440, uid: -1, gid: -1, secretVolume: true, rootOnly: true},
		{name: "group-readable, root's, a group of the reader, not a Secret volume", mode: 0o440, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable, rootOnly: true},
		{name: "group-readable and owner-writable, root's, not a Secret volume", mode: 0o640, uid: -1, gid: -1, refused: dial.ErrTokenFileReadable, rootOnly: true},
		{name: "group-readable and writable, root's", mode: 0o660, uid: -1, gid: -1, secretVolume: true, refused: dial.ErrTokenFileReadable, rootOnly: true},
		{name: "group-readable, root's, a group the reader is not in", mode: 0o640, uid: -1, gid: nobody, secretVolume: true, refused: dial.ErrTokenFileReadable, rootOnly: true},
		{name: "root's, a group of the reader, and everyone", mode: 0o644, uid: -1, gid: -1, secretVolume: true, refused: dial.ErrTokenFileReadable, rootOnly: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && !root {
				t.Skip("needs root to give the file another owner")
			}
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte("dsa_secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, c.mode); err != nil { // not masked by the umask
				t.Fatal(err)
			}
			if c.uid != -1 || c.gid != -1 {
				if err := os.Chown(file, c.uid, c.gid); err != nil {
					t.Fatal(err)
				}
			}
			var opts []dial.TokenOption
			if c.secretVolume {
				opts = append(opts, dial.AllowSecretVolume())
			}
			token, err := dial.Token("", file, opts...)
			if c.refused == nil {
				if err != nil || token != "dsa_secret" {
					t.Fatalf("mode %04o: got %q, %v; want the token", c.mode, token, err)
				}
				return
			}
			fix := "chmod 600 " + file
			if c.refused == dial.ErrTokenFileNotOwned {
				fix = fmt.Sprintf("belongs to uid %d, and this process runs as uid %d; run `chown %d %s`", c.uid, os.Geteuid(), os.Geteuid(), file)
			}
			if !errors.Is(err, c.refused) || !strings.Contains(err.Error(), fix) {
				t.Fatalf("mode %04o: got %q, %v; want %v saying %q", c.mode, token, err, c.refused, fix)
			}
		})
	}
}

// Without a file the flag's token is used, and a missing file is an error
// naming it.
func TestTokenFromFlagOrMissingFile(t *testing.T) {
	if token, err := dial.Token("dso_flag", ""); err != nil || token != "dso_flag" {
		t.Fatalf("got %q, %v", token, err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := dial.Token("", missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing file: got %v", err)
	}
}
