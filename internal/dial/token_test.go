package dial_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/dial"
)

// A token file only its owner may read is read; one a group or everyone
// may read is refused, with the command that fixes it. Root may let one
// group of the reader read it (a Kubernetes Secret mounted with an
// fsGroup), no other.
func TestTokenFileMustBePrivate(t *testing.T) {
	root := os.Geteuid() == 0
	const nobody = 65534
	for _, c := range []struct {
		name string
		mode os.FileMode
		// chown, as root only: the file's owner and group (-1: as created,
		// root's).
		uid, gid int
		refused  bool
		rootOnly bool
	}{
		{name: "owner read-write", mode: 0o600, uid: -1, gid: -1},
		{name: "owner read-only", mode: 0o400, uid: -1, gid: -1},
		{name: "world-readable", mode: 0o644, uid: -1, gid: -1, refused: true},
		{name: "world-readable only", mode: 0o604, uid: -1, gid: -1, refused: true},
		{name: "world-writable", mode: 0o602, uid: -1, gid: -1, refused: true},
		{name: "group-writable", mode: 0o620, uid: -1, gid: -1, refused: true},
		{name: "group-readable, another user's", mode: 0o640, uid: nobody, gid: -1, refused: true, rootOnly: true},
		{name: "group-readable, root's, a group of the reader", mode: 0o440, uid: -1, gid: -1, rootOnly: true},
		{name: "group-readable and writable, root's", mode: 0o660, uid: -1, gid: -1, refused: true, rootOnly: true},
		{name: "group-readable, root's, a group the reader is not in", mode: 0o640, uid: -1, gid: nobody, refused: true, rootOnly: true},
		{name: "root's, a group of the reader, and everyone", mode: 0o644, uid: -1, gid: -1, refused: true, rootOnly: true},
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
			token, err := dial.Token("", file)
			if !c.refused {
				if err != nil || token != "dsa_secret" {
					t.Fatalf("mode %04o: got %q, %v; want the token", c.mode, token, err)
				}
				return
			}
			if !errors.Is(err, dial.ErrTokenFileReadable) || !strings.Contains(err.Error(), "chmod 600 "+file) {
				t.Fatalf("mode %04o: got %q, %v; want a refusal saying `chmod 600 %s`", c.mode, token, err, file)
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
