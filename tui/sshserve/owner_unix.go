//go:build unix

package sshserve

import (
	"io/fs"
	"syscall"
)

// fileOwner is a file's owning user and group.
type fileOwner struct{ uid, gid uint32 }

// ownership returns info's owner.
func ownership(info fs.FileInfo) (fileOwner, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileOwner{}, false
	}
	return fileOwner{uid: st.Uid, gid: st.Gid}, true
}
